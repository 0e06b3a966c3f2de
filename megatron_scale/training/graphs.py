"""The schedule a run steps with, and its whole-iteration CUDA graph (--cuda-graph-impl).

    none            megatron-core's get_forward_backward_func(), called eagerly every step
    full_iteration  the same wrapped in megatron-core's FullCudaGraphWrapper: the first
                    --cuda-graph-warmup-steps calls run eagerly, the next is captured (every
                    microbatch's forward and backward, the gradient reduction megatron-core's
                    finalize_model_grads does inside the schedule), then replayed; the batches are
                    copied into static buffers first. Training and evaluation are captured apart.
                    The optimizer step and the loss readout stay outside, on the host.

As Megatron-LM's training loop does it (megatron/training/training.py): the wrapper around the
schedule, and DDP built on the capture stream. What must hold for a capture is that nothing inside
the step waits for the host: tests/model/test_step_audit.py holds that for every method.
"""

from __future__ import annotations

from typing import Any

import torch

from megatron_scale import _mcore as mc


def forward_backward_func(schedule: Any) -> Any:
    """megatron-core's schedule for this run; with --cuda-graph-impl full_iteration wrapped in its
    FullCudaGraphWrapper (training and evaluation each captured after --cuda-graph-warmup-steps
    eager calls, then replayed), as Megatron-LM's training loop wraps it."""
    func = mc.get_forward_backward_func()
    if schedule.cuda_graph_impl == "full_iteration":
        func = mc.FullCudaGraphWrapper(func, cuda_graph_warmup_steps=schedule.cuda_graph_warmup_steps)
        # The wrapper keeps its graphs and step counts on the class: a second run in one process
        # (a library caller, the GPU tests) must not replay the first run's graph.
        func.reset_cuda_graph()
    return func


def wrap_ddp(model: Any, distributed_optimizer: bool, cuda_graph_impl: str) -> Any:
    """megatron-core's DDP over `model`; for whole-iteration graphs built on the capture stream, so
    the gradient accumulators it keeps do not hold another stream (Megatron-LM's training.py does so)."""
    def make() -> Any:
        config = mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=distributed_optimizer)
        return mc.DistributedDataParallel(model.config, config, module=model)

    if cuda_graph_impl != "full_iteration":
        return make()
    stream = mc.get_shared_capture_stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ddp = make()
    torch.cuda.current_stream().wait_stream(stream)
    return ddp

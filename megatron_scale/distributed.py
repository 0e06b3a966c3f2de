"""Start and stop the process group and megatron-core's model-parallel state; nothing else.

Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as torchrun, srun wrappers and
the test harness set them. NCCL on GPUs, gloo on the CPU (through the CPU backend).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale.cpu_backend import resolve_device


def init_distributed(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    *,
    backend: str | None = None,
    seed: int = 1234,
    device: str = "auto",
    timeout_minutes: int = 10,
) -> str:
    """Initialise torch.distributed and megatron-core's parallel state; returns the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tp, pp = tensor_model_parallel_size, pipeline_model_parallel_size
    if tp < 1 or pp < 1 or world % (tp * pp):
        raise ValueError(
            f"world size {world} is not divisible by --tensor-model-parallel-size {tp} x "
            f"--pipeline-model-parallel-size {pp}"
        )
    device = resolve_device(device)
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(
            backend or ("nccl" if device == "cuda" else "gloo"),
            rank=int(os.environ.get("RANK", "0")),
            world_size=world,
            timeout=datetime.timedelta(minutes=timeout_minutes),
        )
    mc.parallel_state.initialize_model_parallel(tp, pp)
    torch.manual_seed(seed)
    # On CPU there is no CUDA RNG to fork per TP rank; the inference tracker makes the fork a
    # no-op (TP-distinct dropout streams are lost, which matters only with dropout on).
    mc.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=device == "cpu")
    return device


def destroy_distributed() -> None:
    """Tear down megatron-core's parallel state and the process group."""
    mc.parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()

"""Start and stop the process group and megatron-core's model-parallel state; nothing else.

Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as torchrun, srun wrappers and
the test harness set them. NCCL on GPUs, gloo on the CPU (through the CPU backend).

`init_distributed` returns the run's one device (cuda:LOCAL_RANK, or the CPU backend's cpu:0): callers
keep it and pass it to whatever makes tensors, so every batch and every collective's buffer lands
on it.
"""

from __future__ import annotations

import datetime
import os
import random
import socket

import numpy as np
import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale.cpu_backend import DEVICE as CPU_BACKEND_DEVICE
from megatron_scale.cpu_backend import is_cpu_backend_enabled, resolve_device

_run_device: torch.device | None = None


def init_distributed(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    *,
    backend: str | None = None,
    seed: int = 1234,
    device: str = "auto",
    timeout_minutes: int = 10,
) -> torch.device:
    """Initialise torch.distributed and megatron-core's parallel state; returns the run's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tp, pp = tensor_model_parallel_size, pipeline_model_parallel_size
    if tp < 1 or pp < 1 or world % (tp * pp):
        raise ValueError(
            f"world size {world} is not divisible by --tensor-model-parallel-size {tp} x "
            f"--pipeline-model-parallel-size {pp}"
        )
    kind = resolve_device(device)
    run_device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if kind == "cuda" else CPU_BACKEND_DEVICE
    if kind == "cuda":
        torch.cuda.set_device(run_device)
    if not dist.is_initialized():
        dist.init_process_group(
            backend or ("nccl" if kind == "cuda" else "gloo"),
            rank=int(os.environ.get("RANK", "0")),
            world_size=world,
            timeout=datetime.timedelta(minutes=timeout_minutes),
        )
    mc.parallel_state.initialize_model_parallel(tp, pp)
    # Every generator a checkpoint saves and restores (training/checkpointing.py) starts from the
    # seed, as Megatron-LM's _set_random_seed does: unseeded, Python's and numpy's differ per
    # process, and so would every saved checkpoint of the same run.
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # On CPU there is no CUDA RNG to fork per TP rank; the inference tracker makes the fork a
    # no-op (TP-distinct dropout streams are lost, which matters only with dropout on).
    mc.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=kind == "cpu")
    global _run_device
    _run_device = run_device
    return run_device


def run_device() -> torch.device:
    """The device `init_distributed` chose for this process, for code that joins a process group
    someone else started (conversion steps inside torchrun)."""
    if _run_device is None:
        raise RuntimeError("init_distributed has not run in this process; it chooses the run's device")
    return _run_device


def collective_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where a tensor handed to a collective of `group` must live: the current CUDA device for an
    NCCL group, the host for a gloo one. On the CPU backend, whose gloo groups stand in for NCCL,
    the backend's device (the device audit holds such tensors to it)."""
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if is_cpu_backend_enabled():
        return CPU_BACKEND_DEVICE
    return torch.device("cpu")


def destroy_distributed() -> None:
    """Tear down megatron-core's parallel state and the process group."""
    global _run_device
    _run_device = None
    mc.parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for MASTER_PORT of ranks spawned on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

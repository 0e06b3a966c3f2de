"""The CPU backend: lets megatron-core 0.19.2 run on a machine without CUDA, over gloo.

megatron-core assumes CUDA in a handful of places (measured in shared/research/mcore-cpu-probe.md):
`torch.cuda.current_device()` for buffers (sequence parallel, attention, checkpoint save, DDP),
`torch.cuda.synchronize()` and streams (checkpoint save, DDP), `device="cuda"` literals (pipeline
schedules, the fp32 optimizer's loss scale) and `tensor.type() == "torch.cuda.FloatTensor"` checks
(grad clipping, the distributed optimizer). This module maps each of them to the CPU:

    torch.cuda.current_device -> "cpu:0"         torch.cuda.synchronize, Stream, stream -> no-ops
    device="cuda" / .cuda() / .to("cuda")  -> cpu  (a TorchFunctionMode, entered once per process)
    Tensor.type() of a CPU float tensor    -> "torch.cuda.<Float|Half|BFloat16>Tensor"

It is switched on explicitly, by `enable_cpu_backend()` (or `resolve_device("cpu")`), and refuses
to act where CUDA is present, so a GPU run can never be half-mapped to the CPU. It was checked
against one megatron-core version and refuses another. The mode is thread-local: it holds on the
thread that enabled it, which is where CPU autograd runs too.

Because the mapping erases the difference between host and device, it comes with the device audit
(testing/device_audit.py, switched on through hooks.device_audit unless MEGATRON_SCALE_DEVICE_AUDIT=0): a tensor that a GPU run would find on
the host where the device is needed raises, naming where it was made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from megatron_scale import hooks

# The run's device on the CPU backend: the CPU, named cpu:0 so that what the code places on "the
# device" stays apart from what it leaves on the host ("cpu") for the device audit.
DEVICE = torch.device("cpu", 0)

CHECKED_MCORE_VERSION = "0.19.2"

_CUDA_TYPE = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
}
_mode: TorchFunctionMode | None = None


def _cpu(device: Any) -> Any:
    if isinstance(device, str) and device.startswith("cuda"):
        return DEVICE
    if isinstance(device, torch.device) and device.type == "cuda":
        return DEVICE
    if isinstance(device, int) and not isinstance(device, bool):  # a CUDA ordinal
        return DEVICE
    return device


class _CudaToCpu(TorchFunctionMode):
    """Rewrites CUDA devices to the CPU in every torch call, and reports CPU float tensors'
    type() as their CUDA counterparts (megatron-core's optimizer checks compare strings)."""

    def __init__(self, audit: Callable[..., Any] | None) -> None:
        super().__init__()
        self.audit = audit  # the device audit's check of one call (hooks.device_audit), or None

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return _CUDA_TYPE.get(name, name)
        if self.audit is not None:
            return self.audit(func, args, kwargs, lambda: self._mapped(func, args, kwargs))
        return self._mapped(func, args, kwargs)

    @staticmethod
    def _mapped(func: Callable, args: tuple, kwargs: dict) -> Any:
        if func is torch.Tensor.cuda or func is torch.Tensor.pin_memory:  # pinning needs an accelerator
            return args[0]
        if "device" in kwargs:
            kwargs = {**kwargs, "device": _cpu(kwargs["device"])}
        if func is torch.Tensor.to and len(args) > 1:
            args = (args[0], _cpu(args[1]), *args[2:])
        return func(*args, **kwargs)


class _NoStream:
    """Stands in for torch.cuda.Stream: CPU work is synchronous."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args: Any, **kwargs: Any) -> None:
        return None


def _check_version() -> None:
    from importlib.metadata import version

    found = version("megatron-core")
    if found != CHECKED_MCORE_VERSION:
        raise RuntimeError(
            f"the CPU backend was checked against megatron-core=={CHECKED_MCORE_VERSION}, "
            f"found {found}; re-check every CUDA-only spot before enabling it"
        )


def is_cpu_backend_enabled() -> bool:
    return _mode is not None


def enable_cpu_backend() -> bool:
    """Map megatron-core's CUDA-only calls to the CPU. Idempotent.

    Returns True if the backend is (now) on, False if CUDA is present and nothing was changed."""
    global _mode
    if _mode is not None:
        return True
    if torch.cuda.is_available():
        return False
    _check_version()
    cuda = torch.cuda
    cuda.current_device = lambda: str(DEVICE)  # type: ignore[assignment,return-value]  # the CPU backend replaces torch.cuda's functions (their stubs type them)
    cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]  # the CPU backend replaces torch.cuda's functions
    cuda.current_stream = lambda *a, **k: _NoStream()  # type: ignore[assignment]  # the CPU backend replaces torch.cuda's functions
    cuda.Stream = _NoStream  # type: ignore[assignment,misc]  # a stand-in class over torch.cuda.Stream
    cuda.stream = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]  # the CPU backend replaces torch.cuda's functions
    cuda.empty_cache = lambda: None  # type: ignore[assignment]  # the CPU backend replaces torch.cuda's functions
    _mode = _CudaToCpu(hooks.device_audit(DEVICE))
    _mode.__enter__()
    return True


def resolve_device(device: str) -> str:
    """'auto' | 'cpu' | 'cuda' -> the kind of device to run on; 'cpu' enables the CPU backend
    (whose run's device is `DEVICE`).

    'cpu' on a machine with CUDA is refused: the backend never half-maps a GPU run."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is available on this machine")
        return "cuda"
    if not enable_cpu_backend():
        raise ValueError("--device cpu: CUDA is present; run on the GPU (--device cuda or auto)")
    return "cpu"

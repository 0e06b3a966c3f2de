"""The router's partial sums over a vocab slice, (z_p.z_a, |z_p|^2, |z_a|^2) per token: the C++ op
(csrc/route_stats.cpp, megatron_scale._C) on CPU where it is built, else its PyTorch twin.
statistics.py all-reduces them over TP into the cosine statistics.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from types import ModuleType

import torch

_EXT_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def route_statistics_torch(z_p: torch.Tensor, z_a: torch.Tensor) -> torch.Tensor:
    """Per-token partial sums over the local vocab slice: [3, ...] = (z_p.z_a, |z_p|^2, |z_a|^2).

    Accumulated in fp32 whatever the logits dtype. The twin of the C++ op (csrc/route_stats.cpp)."""
    p, a = z_p.float(), z_a.float()
    return torch.stack(((p * a).sum(-1), (p * p).sum(-1), (a * a).sum(-1)))


@functools.cache
def extension() -> ModuleType | None:
    """megatron_scale._C, or None (with one warning) where it was not built."""
    try:
        return importlib.import_module("megatron_scale._C")
    except ImportError as e:
        warnings.warn(
            f"megatron_scale._C is not built ({e}); SCALE-Route statistics use the PyTorch twin. "
            "Build it with `pip install -e .` (C++17 compiler and pybind11) or "
            "`python setup.py build_ext --inplace`.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def _token_rows(z: torch.Tensor) -> torch.Tensor | None:
    """z as a 2-D [tokens, V] view with unit stride along V, or None if it is not one."""
    if z.dim() == 0 or z.stride(-1) != 1 and z.shape[-1] > 1:
        return None
    try:
        return z.view(-1, z.shape[-1])
    except RuntimeError:
        return None


def route_statistics_cpp(z_p: torch.Tensor, z_a: torch.Tensor) -> torch.Tensor | None:
    """The C++ op on CPU float32/bfloat16 logits; None where it does not apply (or is not built)."""
    if z_p.device.type != "cpu" or z_a.device != z_p.device or z_p.shape != z_a.shape:
        return None
    if z_p.dtype not in _EXT_DTYPES or z_a.dtype != z_p.dtype:
        return None
    p2, a2 = _token_rows(z_p), _token_rows(z_a)
    if p2 is None or a2 is None:
        return None
    ext = extension()
    if ext is None:
        return None
    out = torch.empty(3, p2.shape[0], dtype=torch.float32, device=z_p.device)
    if out.numel():
        ext.route_stats(
            p2.data_ptr(), a2.data_ptr(), out.data_ptr(), p2.shape[0], p2.shape[1],
            p2.stride(0) if p2.shape[0] > 1 else p2.shape[1], a2.stride(0) if a2.shape[0] > 1 else a2.shape[1],
            _EXT_DTYPES[z_p.dtype], torch.get_num_threads(),
        )
    return out.view(3, *z_p.shape[:-1])


def route_statistics(z_p: torch.Tensor, z_a: torch.Tensor) -> torch.Tensor:
    """Per-token partial sums (z_p.z_a, |z_p|^2, |z_a|^2) as fp32 [3, ...]: the C++ op on CPU where
    it is built and applies, else its PyTorch twin (on GPU, the twin)."""
    out = route_statistics_cpp(z_p, z_a)
    return route_statistics_torch(z_p, z_a) if out is None else out

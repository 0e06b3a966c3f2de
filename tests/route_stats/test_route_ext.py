"""The C++ SCALE-Route statistics (csrc/route_stats.cpp, megatron_scale._C) against their twin.

Twin: route_sums.route_statistics_torch, (z_p.z_a, |z_p|^2, |z_a|^2) per token in fp32. Both sum in
fp32 in different orders, so they agree to fp32 rounding of sums over the vocab slice: compared
with atol relative to the scale of each sum (|z_p||z_a|). Cases: float32 and bfloat16, 3-D
[s, b, V] logits, rows with a stride (a slice of a wider tensor), one token, a vocab that is no
multiple of the 16 lanes, more threads than tokens, an empty batch. The extension is part of the
install (setup.py), so a missing build fails here; the fallback is tested with it hidden.
"""

from __future__ import annotations

import pytest
import torch

from megatron_scale.route_stats import sums as route_sums
from megatron_scale.route_stats.sums import route_statistics, route_statistics_cpp, route_statistics_torch
from megatron_scale.model.layers.routing import route


def _logits(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z_p = torch.randn(shape, generator=g)
    z_a = z_p + 0.3 * torch.randn(shape, generator=g)
    return z_p.to(dtype), z_a.to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor, z_p: torch.Tensor, z_a: torch.Tensor) -> None:
    scale = (z_p.float().norm(dim=-1) * z_a.float().norm(dim=-1)).clamp_min(1.0)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.all((got - want).abs() <= 1e-5 * scale + 1e-6), (got - want).abs().max()


def test_extension_is_built() -> None:
    assert route_sums.extension() is not None, (
        "megatron_scale._C is not built: `pip install -e .` (or `python setup.py build_ext --inplace`)"
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 3, 1000), (1, 1, 37), (64, 4099), (0, 2, 16)])
def test_cpp_equals_twin(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    z_p, z_a = _logits(shape, dtype)
    got = route_statistics_cpp(z_p, z_a)
    assert got is not None
    _close(got, route_statistics_torch(z_p, z_a), z_p, z_a)


def test_strided_rows_and_many_threads() -> None:
    wide_p, wide_a = _logits((9, 300), torch.float32, seed=1)
    z_p, z_a = wide_p[:, 10:250], wide_a[:, 5:245]  # rows 300 apart, not contiguous
    before = torch.get_num_threads()
    torch.set_num_threads(16)
    try:
        got = route_statistics_cpp(z_p, z_a)
    finally:
        torch.set_num_threads(before)
    assert got is not None
    _close(got, route_statistics_torch(z_p, z_a), z_p, z_a)


def test_cases_the_op_does_not_take_go_to_the_twin() -> None:
    z_p, z_a = _logits((4, 33), torch.float64)
    assert route_statistics_cpp(z_p, z_a) is None  # float64
    assert route_statistics_cpp(z_p.float().t(), z_a.float().t()) is None  # vocab not unit-stride
    assert torch.equal(route_statistics(z_p, z_a), route_statistics_torch(z_p, z_a))


def test_fallback_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where _C was not built, routing still works (the twin), and says once how to build it."""
    import importlib

    real = importlib.import_module

    def no_ext(name: str, *a: object) -> object:
        if name == "megatron_scale._C":
            raise ImportError("No module named 'megatron_scale._C'")
        return real(name, *a)

    route_sums.extension.cache_clear()
    monkeypatch.setattr(importlib, "import_module", no_ext)
    try:
        with pytest.warns(RuntimeWarning, match="setup.py build_ext --inplace"):
            assert route_sums.extension() is None
        z_p, z_a = _logits((5, 20), torch.float32)
        assert torch.equal(route_statistics(z_p, z_a), route_statistics_torch(z_p, z_a))
        logits, keep = route(z_p, z_a, 0.5)
        assert logits.shape == z_p.shape and keep.shape == (5,)
    finally:
        monkeypatch.undo()
        route_sums.extension.cache_clear()
    assert route_sums.extension() is not None

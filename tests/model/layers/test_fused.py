"""The fused local path (megatron_scale/model/layers/fused.py) against plain autograd on slices.

Reference: the block matrix written out with autograd, y = x W^T (+ x_up W12^T),
y_up = [x; x_up] [W21 W22]^T, outputs interleaved chunk by chunk with torch.cat. Checked for
linear_qkv-like (1 chunk) and SwiGLU fc1-like (2 chunks) layouts, with and without W12, assembled
and as two outputs: the base rows are bitwise `torch.matmul(x, W.t())` (exact preservation), the
rest and every gradient equal the reference to fp32 rounding, W gets no gradient, and float64
gradcheck passes. Megatron-level equivalence at TP=1 and TP=2 is test_linear.py's (tests/model/layers/_dense_reference.py).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from megatron_scale.model.layers.fused import upscaled_gemm
from tests.conftest import requires_gpus

N, N_UP, M, M_UP, S, B = 12, 4, 16, 8, 5, 3
CASES = list(itertools.product((1, 2), (False, True), (True, False)))  # chunks, adapt, assemble


def _weights(adapt: bool, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(M, N, generator=g, dtype=dtype)
    up = torch.randn(M_UP, N + N_UP, generator=g, dtype=dtype).requires_grad_()
    w12 = torch.randn(M, N_UP, generator=g, dtype=dtype).requires_grad_() if adapt else None
    x = torch.randn(S, B, N + N_UP, generator=g, dtype=dtype).requires_grad_()
    return x, w, up, w12


def _reference(x, w, up, w12, chunks):  # type: ignore[no-untyped-def]
    y = torch.matmul(x[..., :N], w.t())
    if w12 is not None:
        y = y + torch.matmul(x[..., N:], w12.t())
    y_up = torch.matmul(x, up.t())
    parts: list[torch.Tensor] = []
    for b, u in zip(y.chunk(chunks, -1), y_up.chunk(chunks, -1), strict=True):
        parts += [b, u]
    return torch.cat(parts, -1)


def _assembled(out, chunks):  # type: ignore[no-untyped-def]
    if isinstance(out, torch.Tensor):
        return out
    y, y_up = out
    parts: list[torch.Tensor] = []
    for b, u in zip(y.chunk(chunks, -1), y_up.chunk(chunks, -1), strict=True):
        parts += [b, u]
    return torch.cat(parts, -1)


@pytest.mark.parametrize("chunks,adapt,assemble", CASES)
def test_fused_equals_autograd_reference(chunks: int, adapt: bool, assemble: bool) -> None:
    x, w, up, w12 = _weights(adapt)
    leaves = [x, up] + ([w12] if w12 is not None else [])
    out = _assembled(upscaled_gemm(x, w, up, w12, chunks=chunks, assemble=assemble), chunks)
    ref = _reference(x, w, up, w12, chunks)
    assert out.shape == (S, B, M + M_UP)
    if not adapt:  # the base rows are the base model's, bit for bit
        base = torch.cat(out.split((M // chunks, M_UP // chunks) * chunks, -1)[0::2], -1)
        assert torch.equal(base, torch.matmul(x[..., :N], w.t()))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    grad_out = torch.randn(S, B, M + M_UP, generator=torch.Generator().manual_seed(5))
    # a non-contiguous incoming gradient, as a transposed consumer would send
    grad_out = grad_out.transpose(0, 1).contiguous().transpose(0, 1)
    got = torch.autograd.grad(out, leaves, grad_out)
    want = torch.autograd.grad(ref, leaves, grad_out)
    for g1, g2 in zip(got, want, strict=True):
        torch.testing.assert_close(g1, g2, rtol=0, atol=1e-5)
    assert not w.requires_grad and w.grad is None


@pytest.mark.parametrize("chunks,adapt,assemble", CASES)
def test_fused_gradcheck_float64(chunks: int, adapt: bool, assemble: bool) -> None:
    x, w, up, w12 = _weights(adapt, torch.float64)
    assert torch.autograd.gradcheck(
        lambda x_, up_, w12_: upscaled_gemm(x_, w, up_, w12_, chunks=chunks, assemble=assemble),
        (x, up, w12),
    )


def test_frozen_input_needs_no_input_gradient() -> None:
    """Where nothing upstream trains (x without grad), only the weight gradients are computed."""
    x, w, up, w12 = _weights(True)
    x = x.detach()
    out = upscaled_gemm(x, w, up, w12, chunks=2)
    g_up, g12 = torch.autograd.grad(out.sum(), (up, w12))
    assert g_up.shape == up.shape and g12.shape == w12.shape and torch.count_nonzero(g_up) > 0


@pytest.mark.parametrize("chunks,assemble", list(itertools.product((1, 2), (True, False))))
def test_skip_base_computes_the_trainable_gradient_only(chunks: int, assemble: bool) -> None:
    """skip_base (issue 62): the same forward, bit for bit; [W21 W22]'s gradient bitwise the full
    backward's, the x_up columns of the input gradient equal to fp32 rounding (1e-6 of the largest
    entry); zeros for the base columns; y returned apart has no autograd (no gradient flows into
    its reduction)."""
    x, w, up, _ = _weights(False)
    out_skip = upscaled_gemm(x, w, up, None, chunks=chunks, assemble=assemble, skip_base=True)
    out_full = upscaled_gemm(x, w, up, None, chunks=chunks, assemble=assemble)
    if not assemble:
        assert not out_skip[0].requires_grad and out_skip[1].requires_grad and out_full[0].requires_grad
    a_skip, a_full = _assembled(out_skip, chunks), _assembled(out_full, chunks)
    assert torch.equal(a_skip, a_full)
    grad_out = torch.randn(S, B, M + M_UP, generator=torch.Generator().manual_seed(5))
    g_x, g_up = torch.autograd.grad(a_skip, (x, up), grad_out)
    f_x, f_up = torch.autograd.grad(a_full, (x, up), grad_out)
    assert torch.equal(g_up, f_up)  # the very same GEMMs
    # the x_up columns: the same products over the same K, summed by GEMMs of another width
    torch.testing.assert_close(g_x[..., N:], f_x[..., N:], rtol=0, atol=1e-6 * float(f_x.abs().max()))
    assert not g_x[..., :N].any() and f_x[..., :N].abs().sum() > 0


def test_skip_base_is_refused_with_w12() -> None:
    x, w, up, w12 = _weights(True)
    with pytest.raises(ValueError, match="skip_base with W12"):
        upscaled_gemm(x, w, up, w12, skip_base=True)


@requires_gpus(1)
@pytest.mark.parametrize("chunks,adapt", [(1, False), (2, True)])
def test_fused_on_cuda_bf16(chunks: int, adapt: bool) -> None:
    """On a GPU in bf16: the base rows are bitwise cuBLAS's own `matmul(x, W.t())` output (exact
    preservation), the rest and the gradients match the autograd reference to bf16 rounding."""
    x, w, up, w12 = (t.detach().cuda().bfloat16().requires_grad_(t.requires_grad) if t is not None else None
                     for t in _weights(adapt))
    out = upscaled_gemm(x, w, up, w12, chunks=chunks)
    ref = _reference(x, w, up, w12, chunks)
    if not adapt:
        base = torch.cat(out.split((M // chunks, M_UP // chunks) * chunks, -1)[0::2], -1)
        assert torch.equal(base, torch.matmul(x[..., :N], w.t()))
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    leaves = [x, up] + ([w12] if w12 is not None else [])
    for g1, g2 in zip(torch.autograd.grad(out.sum(), leaves), torch.autograd.grad(ref.sum(), leaves), strict=True):
        torch.testing.assert_close(g1, g2, rtol=2e-2, atol=5e-2)

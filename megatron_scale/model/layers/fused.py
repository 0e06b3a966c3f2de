"""The local fast path of an upscaled linear: one autograd Function, three GEMMs forward.

    [ y    ]   [ W    W12 ] [ x    ]      forward:  y    = x W^T (+ x_up W12^T)   base GEMM, alone
    [ y_up ] = [ W21  W22 ] [ x_up ]                y_up = [x; x_up] [W21 W22]^T  one GEMM, whole input

    backward: dX      = dy_up [W21 W22]                 one GEMM, writes the whole [dx; dx_up]
              dX[:n] += dy W,  dX[n:] += dy W12         in place, on views of dX (addmm_)
              d[W21 W22] = dy_up^T [x; x_up],  dW12 = dy^T x_up
              W gets nothing: it is frozen, so no weight-gradient GEMM is ever issued for it.

Why a Function rather than plain autograd: autograd's backward of the slice x = X[..., :n] builds
a zero tensor of X's full size and adds into it, once per slice, and the concatenation of outputs
is a copy forward and a split backward. Here the input gradient is one buffer that the GEMMs
accumulate into, the inputs are views, and (with `assemble`) the new rows are written straight into
the layer's output buffer.

Exact preservation: y is computed by `torch.matmul(x, W.t())` into a tensor of its own, the very
call (and output layout) megatron-core's linears make, then copied into place. Writing the base
GEMM straight into a strided slice of the output would also be one GEMM, but with a different
leading dimension, and cuBLAS may then pick another kernel; the copy is cheap beside the GEMM.

Layout: with `chunks` c (2 for SwiGLU's [gate; up]) the assembled local output is
[y_0, y_up_0, ..., y_{c-1}, y_up_{c-1}] (partition.py); row j-th chunk of W/W12/[W21 W22] feeds it.

Skipping the base stream's backward (`skip_base`, --scale-base-backward; issue 62). Without W12 the
base features x depend on no trainable parameter, so no trainable gradient reads dL/dx, and the
gradient of x_up never passes through x (x never sees x_up). The backward then computes only

    dX[:, :n] = 0                              not W^T dy, nor W21^T dy_up: nobody reads them
    dX[:, n:] = dy_up W22                      one GEMM per chunk, K = m'/c, into the x_up columns
    d[W21 W22] = dy_up^T [x; x_up]             unchanged: W21's gradient still needs x

per token 2m'n' + 2m'(n+n') backward instead of 2mn + 4m'(n+n'). The zeros are the gradient the
skip defines for the base features (every module of the model hands zeros there under the skip,
so they are what flows), and every trainable gradient is the full backward's: the same GEMMs on
the same operands, only the dead ones left out. Under the skip, y (returned apart: row-parallel
at TP > 1) carries no autograd at all, so its reduction has no backward either.
"""

from __future__ import annotations

from typing import Any

import torch


def _row_chunks(t: torch.Tensor, chunks: int) -> tuple[torch.Tensor, ...]:
    return (t,) if chunks == 1 else t.chunk(chunks, dim=0)


def _cols(t: torch.Tensor, sizes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    return t.split(sizes, dim=-1)


class UpscaledGemm(torch.autograd.Function):
    """(x_full [.., n+n'], W [m, n], weight_up [m', n+n'], W12 [m, n'] | None) ->
    the interleaved output [.., m+m'] if `assemble`, else (y [.., m], y_up [.., m'])."""

    @staticmethod
    def forward(
        ctx: Any,
        x_full: torch.Tensor,
        weight: torch.Tensor,
        weight_up: torch.Tensor,
        weight_12: torch.Tensor | None,
        chunks: int,
        assemble: bool,
        skip_base: bool,
    ) -> Any:
        if skip_base and weight_12 is not None:
            raise ValueError("upscaled_gemm: skip_base with W12: W12's gradient needs the base stream's backward")
        n = weight.shape[1]
        m, m_up = weight.shape[0], weight_up.shape[0]
        lead = x_full.shape[:-1]
        x2 = x_full.reshape(-1, x_full.shape[-1])
        # Base rows: megatron-core's own call, own buffer (bitwise the base model).
        y = torch.matmul(x_full[..., :n], weight.t())
        if weight_12 is not None:
            y = y + torch.matmul(x_full[..., n:], weight_12.t())
        ctx.save_for_backward(x_full, weight, weight_up, weight_12)
        ctx.chunks, ctx.assemble, ctx.skip_base = chunks, assemble, skip_base
        if not assemble:
            if skip_base:  # nobody reads dy: no gradient flows into y, nor into its reduction
                ctx.mark_non_differentiable(y)
                ctx.set_materialize_grads(False)
            return y, torch.matmul(x_full, weight_up.t())
        out = x2.new_empty(x2.shape[0], m + m_up)
        mb, mu = m // chunks, m_up // chunks
        pieces = _cols(out, (mb, mu) * chunks)
        y2 = y.reshape(-1, m)
        if chunks == 1:
            torch.mm(x2, weight_up.t(), out=pieces[1])  # new rows straight into the output
        else:
            y_up = torch.mm(x2, weight_up.t())
            for j, part in enumerate(_cols(y_up, (mu,) * chunks)):
                pieces[2 * j + 1].copy_(part)
        for j, part in enumerate(_cols(y2, (mb,) * chunks)):
            pieces[2 * j].copy_(part)
        return out.view(*lead, m + m_up)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        x_full, weight, weight_up, weight_12 = ctx.saved_tensors
        chunks = ctx.chunks
        n = weight.shape[1]
        m, m_up = weight.shape[0], weight_up.shape[0]
        mb, mu = m // chunks, m_up // chunks
        x2 = x_full.reshape(-1, x_full.shape[-1])
        if ctx.assemble:
            g = grads[0].reshape(-1, m + m_up)
            parts = _cols(g, (mb, mu) * chunks)
            dy, dy_up = parts[0::2], parts[1::2]
        else:
            if grads[1] is None:  # only under skip_base (grads not materialised): y_up unused
                return None, None, None, None, None, None, None
            dy = () if ctx.skip_base else _cols(grads[0].reshape(-1, m), (mb,) * chunks)  # () : never read
            dy_up = _cols(grads[1].reshape(-1, m_up), (mu,) * chunks)
        w_rows, up_rows = _row_chunks(weight, chunks), _row_chunks(weight_up, chunks)
        w12_rows = _row_chunks(weight_12, chunks) if weight_12 is not None else None

        grad_x = grad_up = grad_12 = None
        if ctx.needs_input_grad[0] and ctx.skip_base:
            grad_x = x2.new_empty(x2.shape)
            grad_x[:, :n].zero_()
            gx_up = grad_x[:, n:]
            for j in range(chunks):  # beta 0 first: the buffer's values are never read
                gx_up.addmm_(dy_up[j], up_rows[j][:, n:], beta=0 if j == 0 else 1)
            grad_x = grad_x.view(x_full.shape)
        elif ctx.needs_input_grad[0]:
            grad_x = torch.mm(dy_up[0], up_rows[0])
            for j in range(1, chunks):
                grad_x.addmm_(dy_up[j], up_rows[j])
            gx, gx_up = grad_x[:, :n], grad_x[:, n:]
            for j in range(chunks):
                gx.addmm_(dy[j], w_rows[j])
                if w12_rows is not None:
                    gx_up.addmm_(dy[j], w12_rows[j])
            grad_x = grad_x.view(x_full.shape)
        if ctx.needs_input_grad[2]:
            grad_up = torch.empty_like(weight_up)
            for j, rows in enumerate(_row_chunks(grad_up, chunks)):
                torch.mm(dy_up[j].t(), x2, out=rows)
        if weight_12 is not None and ctx.needs_input_grad[3]:
            grad_12 = torch.empty_like(weight_12)
            x_up2 = x2[:, n:]
            for j, rows in enumerate(_row_chunks(grad_12, chunks)):
                torch.mm(dy[j].t(), x_up2, out=rows)
        return grad_x, None, grad_up, grad_12, None, None, None


def upscaled_gemm(
    x_full: torch.Tensor,
    weight: torch.Tensor,
    weight_up: torch.Tensor,
    weight_12: torch.Tensor | None,
    *,
    chunks: int = 1,
    assemble: bool = True,
    skip_base: bool = False,
) -> Any:
    """Apply the upscaled block matrix to the local input (see the module docstring); `skip_base`:
    no gradient for the base features x (zeros there) and none into y (refused with W12)."""
    return UpscaledGemm.apply(x_full, weight, weight_up, weight_12, chunks, assemble, skip_base)

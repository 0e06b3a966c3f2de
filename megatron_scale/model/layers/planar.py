"""The residual stream as two planes (--scale-te-linear fused, te_fused.py).

A SCALE layer reads and writes the stream [x; x_up] of d + d' features per token. Held the way a
dense model holds its stream, token-major ([s, b, d + d'], each token's d then d' features), every
TE call that wants one half contiguous has to copy it out, and every output made of two GEMMs has
to be concatenated back. Held planar, the same [s, b, d + d'] tensor keeps all tokens' x first and
all tokens' x_up after:

    t.view(-1) = [ x.view(-1) (s b d) ; x_up.view(-1) (s b d') ]

so both halves are contiguous views of it (`planes`), a row-parallel linear writes y and y_up
straight into them, and a norm reads them where they lie. megatron-core's layer only adds,
drops out and passes the stream on (elementwise, so any layout), and pipeline stages send it as
bytes; what reads features by position is SCALE's own: the linears and the split norms inside
them (te_fused.py), the final norm, the embedding that makes the stream and the output layer that
reads it (heads.py), each told `planar`. Gathering or scattering along the tokens (sequence
parallelism) works plane by plane, and the planes are joined again afterwards (`join`, one copy).
"""

from __future__ import annotations

from typing import Any

import torch


def planes(t: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two halves of a planar stream [.., d + d'] as contiguous views [.., d] and [.., d']."""
    if not t.is_contiguous():
        raise ValueError(f"a planar stream must be contiguous, got strides {t.stride()} for {tuple(t.shape)}")
    w, lead = t.shape[-1], t.shape[:-1]
    if not 0 < d < w:
        raise ValueError(f"planar stream of width {w}: base width {d} must lie in (0, {w})")
    n = t.numel() // w * d
    flat = t.view(-1)
    return flat[:n].view(*lead, d), flat[n:].view(*lead, w - d)


def join(x: torch.Tensor | None, x_up: torch.Tensor | None, shape: tuple[int, ...] | torch.Size | None = None,
         d: int | None = None) -> torch.Tensor:
    """A planar stream holding x [.., d] and x_up [.., d'] (each plane written once: a copy, or
    zeros where its part is None): of `shape` [.., d + d'] with base width `d` where given (they
    must be where a part is None), else of the parts' tokens."""
    if shape is None and x is not None and x_up is not None:
        if tuple(x.shape[:-1]) != tuple(x_up.shape[:-1]):
            raise ValueError(f"join: the planes' tokens differ: {tuple(x.shape)} and {tuple(x_up.shape)}")
        shape, d = (*x.shape[:-1], x.shape[-1] + x_up.shape[-1]), x.shape[-1]
    like = x if x is not None else x_up
    if like is None or shape is None or d is None:
        raise ValueError("join: give both planes, or one plane with the stream's shape and base width")
    out = like.new_empty(shape)
    for plane, part in zip(planes(out, d), (x, x_up), strict=True):
        if part is None:
            plane.zero_()
        else:
            plane.copy_(part.view_as(plane))
    return out


class _Planes(torch.autograd.Function):
    """t -> (x, x_up) views; the backward joins their gradients (zeros for one not used)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.d, ctx.shape = d, t.shape
        ctx.set_materialize_grads(False)
        x, x_up = planes(t, d)
        return x.view_as(x), x_up.view_as(x_up)

    @staticmethod
    def backward(ctx: Any, gx: torch.Tensor | None, gx_up: torch.Tensor | None) -> Any:
        if gx is None and gx_up is None:
            return None, None
        return join(gx, gx_up, ctx.shape, ctx.d), None


class _Join(torch.autograd.Function):
    """(x, x_up) -> the planar stream; the backward hands the planes of its gradient (views)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, x_up: torch.Tensor) -> torch.Tensor:
        ctx.d = x.shape[-1]
        return join(x, x_up)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return planes(grad.contiguous(), ctx.d)


def split_planes(t: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`planes` under autograd: the gradient of t is the two planes' joined (one copy)."""
    return _Planes.apply(t, d)


def join_planes(x: torch.Tensor, x_up: torch.Tensor) -> torch.Tensor:
    """`join` under autograd: the gradients of x and x_up are views of the stream's."""
    return _Join.apply(x, x_up)

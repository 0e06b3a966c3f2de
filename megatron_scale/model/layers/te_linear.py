"""SCALE's upscaled linears on Transformer Engine GEMMs (--transformer-impl transformer_engine).

The same block matrix, TP partition, layout and checkpoint entries as linear.py; what differs is
what multiplies. Each block is a `transformer_engine.pytorch.Linear` with parallel_mode=None, so
under FP8 (megatron-core's autocast, --fp8-format / --fp8-recipe) TE casts, scales and multiplies:

    base_gemm   W          [m, n]       frozen: TE issues no weight-gradient GEMM and reads no
                                        main_grad for a weight that does not require grad (also
                                        under gradient-accumulation fusion); FP8 cast cached
    up_gemm     [W21 W22]  [m', n+n']   trainable, over the whole local input [x; x_up]
    w12_gemm    W12        [m, n']      Adapt only, zero-initialised, added to the base rows

The TP communication stays linear.py's: one gather (or copy) of [x; x_up] feeds every block, and
row-parallel y and y_up are reduced apart, so the base path's reduction is the base model's. The
checkpoint entries are the local backend's (`weight`, `weight_21`, `weight_22`, `weight_12...`): a
run can change --transformer-impl on resume, and every tool reads either. TE's FP8 scaling state
(`_extra_state`) is not checkpointed: after a resume, delayed scaling starts its amax history anew.
(TE 2.20 stores delayed-scaling state as a pickle and refuses to load one unless
NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE=1; SCALE checkpoints never need it.)

FP8 cast of the frozen base: megatron-core sets `is_first_microbatch` on the first microbatch of
each step and TE then recasts the weight, which may have changed. The base never changes, so it is
recast on the first microbatch of only the first FROZEN_RECASTS steps after a build or a load (the
first cast under delayed scaling uses the initial scale, the second the scale of the weight's own
amax); after that TE's cached FP8 copy, which carries its own scale, is reused.

Not used: TE's LayerNormLinear. It fuses the norm with the FP8 cast only when the norm output is
not returned (layernorm_linear.py, `with_quantized_norm`), and the new rows need the normalised base
features; and it adds the gradient of a returned norm output after its own TP reduction, which is
wrong for a consumer whose gradient is partial on each rank, as the new rows' is. The split norm
(norm.py) stays a module of its own in front of these linears.

The base stream's backward skipped (`skip_base_grad`, fused.py): both TE blocks get a detached
input, so TE issues no dgrad at all (the base one, W^T dy, and the new rows' into the base
features, W21^T dy_up) and still the new rows' weight gradient; `_NewFeaturesGrad` then adds the
one input gradient anybody reads, dx_up = dy_up W22 (one GEMM, on the blocks' high-precision
weight also under FP8), and hands zeros for x.

Only the GEMM-composition code here can run without a GPU (tests/model/layers/test_te_backend.py hands
`te_pytorch` a torch stand-in); TE itself is exercised by the `gpu` tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from megatron_scale.model.layers.linear import (
    ScaleColumnParallelLinear,
    ScaleRowParallelLinear,
    mark_tp,
)
from megatron_scale.model.layers.partition import interleave_chunks, param_device
from megatron_scale.model.layers.te import te_pytorch

FROZEN_RECASTS = 2
FP8_MULTIPLE = 16  # TE's FP8 GEMMs need every matrix dimension divisible by 16
_BLOCKS = {"weight": "base_gemm", "weight_up": "up_gemm", "weight_12": "w12_gemm"}


class _NewFeaturesGrad(torch.autograd.Function):
    """(y_up, x_full [.., n+n'], weight_up [m', n+n'] detached, n) -> y_up; backward: dy_up to y_up's
    TE node (its weight gradient), [0, dy_up W22] to x_full."""

    @staticmethod
    def forward(
        ctx: Any, y_up: torch.Tensor, x_full: torch.Tensor, weight_up: torch.Tensor, n: int
    ) -> torch.Tensor:
        ctx.save_for_backward(weight_up)
        ctx.n, ctx.shape = n, x_full.shape
        return y_up.view_as(y_up)

    @staticmethod
    def backward(ctx: Any, dy_up: torch.Tensor) -> Any:
        (weight_up,) = ctx.saved_tensors
        n = ctx.n
        grad_x = dy_up.new_empty(ctx.shape)
        grad_x[..., :n].zero_()
        g = grad_x.view(-1, ctx.shape[-1])
        g[:, n:].addmm_(dy_up.reshape(-1, dy_up.shape[-1]), weight_up[:, n:], beta=0)
        return dy_up, grad_x, None, None


class _Gemm(Protocol):
    """What the blocks use of a transformer_engine.pytorch.Linear (TE ships no type information)."""

    weight: nn.Parameter

    def __call__(self, inp: torch.Tensor, *, is_first_microbatch: bool | None = None) -> torch.Tensor: ...


def _zero(t: torch.Tensor) -> None:
    with torch.no_grad():
        t.zero_()


class _TEBlocks(nn.Module):
    """Mixin over the local classes: the blocks live in TE Linear modules (module docstring)."""

    config: Any
    split: Any
    tp_size: int
    in_local: int
    skip_base_grad: bool
    base_gemm: _Gemm
    up_gemm: _Gemm
    w12_gemm: _Gemm | None

    def __init__(self, *args: Any, fuse_wgrad_accumulation: bool = False, **kwargs: Any) -> None:
        # TE's own gradient-accumulation fusion, asked for by the spec (ScaleBackend.wgrad_fusion)
        # or by the config; megatron-core's, which needs apex, stays the config's alone.
        self._fuse_wgrad = fuse_wgrad_accumulation
        super().__init__(*args, **kwargs)

    def _make_weights(self, n: int, n_up: int, m: int, m_up: int, init_method: Callable[[torch.Tensor], None]) -> None:
        cfg = self.config
        if getattr(cfg, "fp8", None):
            dims = {"n": n, "n'": n_up, "m": m, "m'": m_up}
            bad = {k: v for k, v in dims.items() if v % FP8_MULTIPLE}
            if bad:
                raise ValueError(
                    f"--fp8-format: Transformer Engine's FP8 GEMMs need every per-rank dimension "
                    f"divisible by {FP8_MULTIPLE}; this {self.split.parallel}-parallel linear has {bad}"
                )
        te = te_pytorch()

        def linear(inp: int, out: int, init: Callable[[torch.Tensor], None]) -> _Gemm:
            return te.Linear(
                inp, out, bias=False, params_dtype=cfg.params_dtype, device=param_device(cfg),
                init_method=init, parallel_mode=None, tp_size=1, sequence_parallel=False,
                fuse_wgrad_accumulation=self._fuse_wgrad or bool(cfg.gradient_accumulation_fusion),
            )

        self.base_gemm = linear(n, m, init_method)
        self.up_gemm = linear(n + n_up, m_up, init_method)
        self.w12_gemm = linear(n_up, m, _zero) if self.split.adapt else None
        for p in (self.weight, self.weight_up, self.weight_12):
            if p is not None:
                mark_tp(p, self.split.tp_axis, is_parallel=self.tp_size > 1)
        self.is_first_microbatch = True  # set by megatron-core's schedule on each step's first
        self._base_recasts = 0

    @property
    def weight(self) -> nn.Parameter:
        return self.base_gemm.weight

    @property
    def weight_up(self) -> nn.Parameter:
        return self.up_gemm.weight

    @property
    def weight_12(self) -> nn.Parameter | None:
        return None if self.w12_gemm is None else self.w12_gemm.weight

    def _state_keys(self) -> dict[str, str]:
        return {k: f"{v}.weight" for k, v in _BLOCKS.items()}

    def _cast_flags(self) -> tuple[bool | None, bool | None]:
        """TE's is_first_microbatch for (the frozen base, the trainable blocks)."""
        if getattr(self.config, "disable_parameter_transpose_cache", False):
            return None, None
        first = bool(self.is_first_microbatch)
        self.is_first_microbatch = False
        base = first and self._base_recasts < FROZEN_RECASTS
        self._base_recasts += int(base)
        return base, first

    def _gemm(self, x_full: torch.Tensor, assemble: bool) -> Any:
        base_first, new_first = self._cast_flags()
        n = self.in_local
        if self.skip_base_grad:  # refused with W12 (linear.py)
            y = self.base_gemm(x_full[..., :n].detach(), is_first_microbatch=base_first)
            y_up = self.up_gemm(x_full.detach(), is_first_microbatch=new_first)
            if x_full.requires_grad:
                y_up = _NewFeaturesGrad.apply(y_up, x_full, self.weight_up.detach(), n)
            return (y, y_up) if not assemble else interleave_chunks(y, y_up, self.split.chunks)
        y = self.base_gemm(x_full[..., :n], is_first_microbatch=base_first)
        if self.w12_gemm is not None:
            y = y + self.w12_gemm(x_full[..., n:], is_first_microbatch=new_first)
        y_up = self.up_gemm(x_full, is_first_microbatch=new_first)
        if not assemble:
            return y, y_up
        return interleave_chunks(y, y_up, self.split.chunks)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        # Checkpoints carry no TE scaling state: an empty one keeps each block's own (TE returns
        # before unpickling anything). New base values: recast.
        for name in _BLOCKS.values():
            if getattr(self, name) is not None:
                state_dict.setdefault(f"{prefix}{name}._extra_state", torch.empty(0, dtype=torch.uint8))
        self._base_recasts = 0
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


# The override ignores below: the local classes' weights are attributes their _make_weights assigns;
# here they are read-only views of the TE blocks' weights, and _TEBlocks overrides _make_weights, so
# nothing assigns them (mypy cannot see that an override removes the only writer).
class ScaleTEColumnParallelLinear(_TEBlocks, ScaleColumnParallelLinear):  # type: ignore[override]  # see above
    """ScaleColumnParallelLinear with TE GEMMs (linear_qkv, linear_fc1)."""


class ScaleTERowParallelLinear(_TEBlocks, ScaleRowParallelLinear):  # type: ignore[override]  # see above
    """ScaleRowParallelLinear with TE GEMMs (linear_proj, linear_fc2)."""

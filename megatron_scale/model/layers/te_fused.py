"""SCALE's upscaled linears as one Transformer Engine autograd node each (--scale-te-linear fused).

    [ y    ]   [ W    W12 ] [ x    ]      y    = x W^T  (+ x_up W12^T)        the base GEMM, alone
    [ y_up ] = [ W21  W22 ] [ x_up ]      y_up = x W21^T + x_up W22^T         split K, accumulated

The algebra of fused.py, with every GEMM through TE's functional layer (model/layers/te.py
te_functional: general_gemm, rmsnorm_fwd/bwd, swiglu/dswiglu) inside one torch.autograd.Function
per linear, the pattern of TE's own modules (one node, where te_linear.py's composition had two
or three te.Linear modules and autograd's slices, concatenations and zero-fills between them):

- The base GEMM is megatron-core's TE call: general_gemm(W, x), layout TN, a fresh output, on the
  same contiguous [tokens, n] operand of the same TP partition, so bf16 Preserve stays bitwise the
  base. Its dgrad, where it is needed, accumulates into the dgrad of the new rows.
- Only contiguous operands reach TE (TE's C++ reads a pointer and a shape). The new rows are split
  along the input (W21 on x, W22 on x_up, accumulating), so no input is concatenated for them, and
  their weight gradients go straight into fp32 main_grad with gradient-accumulation fusion.
- qkv and fc1 hold their split norm (ScaleTENormColumnLinear, where megatron-core's TE spec holds
  TELayerNormColumnParallelLinear): TE's rmsnorm on each half of the residual stream, the base half
  with the frozen gain exactly as TE's LayerNormLinear normalises it. The normalised features never
  leave the node, so te_linear.py's objections to LayerNormLinear do not arise.
- The MLP (ScaleTEMLP) runs TE's SwiGLU on each half and hands fc2 the pair (a, a_up): the
  interleaved fc1 output [gate, gate_up, up, up_up] of the local path never exists.
- proj keeps [W21 W22] as one weight over its whole (contiguous) input, copying only the base heads
  for the base GEMM's operand; the block's final norm (ScaleTEFinalNorm) is TE's rmsnorm on each
  plane, writing the planes of its output in place.
- TP/SP communication stays linear.py's, inside the node: one gather (or none) of the normalised
  halves, and row-parallel y and y_up reduced apart (the base's reduction is the base model's).

The residual stream is planar (planar.py: all tokens' x, then all tokens' x_up): each norm reads
its halves as views, each row linear writes y and y_up straight into the planes of a fresh stream
(reduced in place; under SP reduce-scattered, then joined), and ScaleTESelfAttention takes query,
key and value from qkv's (y, y_up) without ever building [y; y_up]. What stays copied: each norm
backward joins its halves' gradients (TE's rmsnorm_bwd writes no given output), query, key and
value each set the base and new heads side by side, and proj's base heads for the base GEMM.
tests/model/test_step_audit.py counts them (1.12x full fine-tuning's bytes).

`skip_base_grad` (Preserve only: the base stream then feeds no trainable parameter): no dgrad into
the base features, neither W^T dy nor W21^T dy_up, and no backward of the base norm; every
trainable gradient is exact. Checkpoint entries are the local backend's (partition.py), so a run
may switch --transformer-impl or --scale-te-linear on resume. bf16 (and fp32) only: FP8 runs
--scale-te-linear modules (te_linear.py) until the quantizers are wired in here.

`ops` is TE's functional layer by default; torch_ops.py's TORCH_OPS runs the same composition in
torch (--scale-local-linear planar: spec.py local_backend), on any device.

Per rank, as linear.py: column W [m/tp, n], W21 [m'/tp, n], W22 [m'/tp, n'], W12 [m/tp, n'];
row W [m, n/tp], [W21 W22] or W21, W22 over [n/tp; n'/tp], W12 [m, n'/tp].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.model.layers.linear import mark_tp
from megatron_scale.model.layers.partition import (
    BlockSplit,
    blocks_sharded_state_dict,
    dp_group,
    expansion_sharded_state_dict,
    param_device,
)
from megatron_scale.model.layers.norm import SplitRMSNorm
from megatron_scale.model.layers.planar import join, planes
from megatron_scale.model.layers.te import te_functional
from megatron_scale.model.weights.keys import W12, W21, W22


@dataclass(frozen=True)
class _Call:
    """What a node needs besides its tensors."""

    ops: Any  # te_functional()
    group: Any
    tp: int
    sp: bool
    skip: bool  # skip_base_grad
    fuse: bool  # weight gradients into main_grad
    eps: float = 0.0


def _fwd(c: _Call, w: torch.Tensor, x: torch.Tensor, out: torch.Tensor | None = None, *,
         accumulate: bool | None = None) -> torch.Tensor:
    """y (+)= x W^T: TE's forward GEMM (layout TN); into `out` (accumulating, unless told not to)
    or a fresh output."""
    acc = out is not None if accumulate is None else accumulate
    return c.ops.general_gemm(w, x, out_dtype=x.dtype, layout="TN", out=out, accumulate=acc)[0]


def _dgrad(c: _Call, w: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """dx (+)= dy W (layout NN)."""
    return c.ops.general_gemm(w, dy, out_dtype=dy.dtype, layout="NN", out=out, accumulate=out is not None,
                              grad=True)[0]


def _wgrad(c: _Call, x: torch.Tensor, dy: torch.Tensor, p: torch.Tensor | None) -> torch.Tensor | None:
    """dW = dy^T x (layout NT); with the fusion straight into p.main_grad, as megatron-core's
    linears do (then autograd gets a placeholder and DDP, seeing grad_added_to_main_grad, adds nothing)."""
    if p is None or not p.requires_grad:
        return None
    if c.fuse and hasattr(p, "main_grad"):
        c.ops.general_gemm(x, dy, out_dtype=p.main_grad.dtype, layout="NT", out=p.main_grad, accumulate=True, grad=True)
        if hasattr(p, "grad_added_to_main_grad"):
            p.grad_added_to_main_grad = True
            return torch.empty(p.shape, dtype=x.dtype, device=x.device)
        return None
    return c.ops.general_gemm(x, dy, out_dtype=p.dtype, layout="NT", grad=True)[0]


def _gather(t: torch.Tensor, c: _Call) -> torch.Tensor:
    """Sequence parallel: the tokens of every rank (the column input); else the input itself."""
    return mc.gather_along_first_dim(t, c.group) if c.sp and c.tp > 1 else t


def _reduce(t: torch.Tensor, c: _Call) -> torch.Tensor:
    """Partial sums over TP ranks: reduce-scattered along the tokens (SP) or all-reduced."""
    if c.tp == 1:
        return t
    return mc.reduce_scatter_along_first_dim(t, c.group) if c.sp else mc.all_reduce_in_group(t, c.group)


def _tokens(lead: torch.Size, c: _Call, gathered: bool) -> tuple[int, ...]:
    """The leading [s, b] dims after a gather (column) or a reduce-scatter (row) under SP."""
    if not (c.sp and c.tp > 1):
        return tuple(lead)
    s = lead[0] * c.tp if gathered else lead[0] // c.tp
    return (s, *lead[1:])


class _NormColumn(torch.autograd.Function):
    """the planar stream [.., d + d'] -> split norm -> (gather) -> (y [.., m], y_up [.., m'])."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, g: torch.Tensor, g_up: torch.Tensor, w: torch.Tensor,
                w21: torch.Tensor, w22: torch.Tensor, w12: torch.Tensor | None, c: _Call) -> Any:
        ops, d = c.ops, g.shape[0]
        x, x_up = (t.reshape(-1, t.shape[-1]) for t in planes(hidden, d))  # the stream's planes, in place
        te_dtype = ops.TE_DType[hidden.dtype]
        ln, _, rs = ops.rmsnorm_fwd(x, g, c.eps, None, None, te_dtype, 0, False)
        ln_up, _, rs_up = ops.rmsnorm_fwd(x_up, g_up, c.eps, None, None, te_dtype, 0, False)
        ln, ln_up = _gather(ln, c), _gather(ln_up, c)
        y = _fwd(c, w, ln)  # megatron-core's TE call: bitwise the base
        if w12 is not None:
            _fwd(c, w12, ln_up, out=y)
        y_up = _fwd(c, w21, ln)
        _fwd(c, w22, ln_up, out=y_up)
        base = (None, None) if c.skip else (x, rs)
        ctx.save_for_backward(*base, x_up, rs_up, g, g_up, w, w21, w22, w12, ln, ln_up)
        ctx.c, ctx.shape, ctx.m = c, hidden.shape, w.shape[0]
        ctx.set_materialize_grads(False)
        lead = _tokens(hidden.shape[:-1], c, gathered=True)
        return y.view(*lead, -1), y_up.view(*lead, -1)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
        x, rs, x_up, rs_up, g, g_up, w, w21, w22, w12, ln, ln_up = ctx.saved_tensors
        c, m = ctx.c, ctx.m
        base_needed = not c.skip or w12 is not None
        grad_y, grad_up = grads
        assert grad_up is not None  # y_up feeds the new rows' path, always read
        dy = grad_y.reshape(-1, m).contiguous() if grad_y is not None and base_needed else None
        dy_up = grad_up.reshape(-1, w21.shape[0]).contiguous()
        gw21, gw22 = _wgrad(c, ln, dy_up, w21), _wgrad(c, ln_up, dy_up, w22)
        gw12 = _wgrad(c, ln_up, dy, w12) if w12 is not None and dy is not None else None
        d_up = _dgrad(c, w22, dy_up)
        if w12 is not None and dy is not None:
            _dgrad(c, w12, dy, out=d_up)
        dx_up, dg_up = c.ops.rmsnorm_bwd(_reduce(d_up, c), x_up, rs_up, g_up, 0, False)
        dx = None  # under the skip (no base dgrad: the base stream feeds no trainable parameter), zeros
        if not c.skip:
            d_base = _dgrad(c, w21, dy_up)
            if dy is not None:
                _dgrad(c, w, dy, out=d_base)
            dx, _ = c.ops.rmsnorm_bwd(_reduce(d_base, c), x, rs, g, 0, False)
        grad = join(dx, dx_up, ctx.shape, g.shape[0])  # the stream's gradient, planar: each plane written once
        return (grad, None, dg_up if g_up.requires_grad else None, None, gw21, gw22, gw12, None)


class _Row(torch.autograd.Function):
    """Row-parallel: (x [.., n], x_up [.., n']) or the whole input [.., n + n'] (x_up None, w_up
    then [W21 W22]) -> the planar stream [.., m + m'] (planar.py), y and y_up reduced apart."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, x_up: torch.Tensor | None, w: torch.Tensor, w_up: torch.Tensor,
                w22: torch.Tensor | None, w12: torch.Tensor | None, c: _Call) -> Any:
        n, m, m_up = w.shape[1], w.shape[0], w_up.shape[0]
        lead = x.shape[:-1]
        xf = x.reshape(-1, x.shape[-1]).contiguous()
        scattered = c.sp and c.tp > 1  # reduce-scattered outputs are fresh: joined into the stream after
        out = None if scattered else xf.new_empty(xf.shape[0], m + m_up)
        y_out, up_out = (None, None) if out is None else planes(out, m)
        if x_up is None:  # proj: one GEMM of the new rows over the whole input
            # the one copy: the base heads, the base GEMM's own operand; its output a buffer of its
            # own as a fresh one would be (the plane at the stream's start), so bitwise the base
            y = _fwd(c, w, xf[:, :n].contiguous(), out=y_out, accumulate=False)
            xu = xf[:, n:].contiguous() if w12 is not None else None
            y_up = _fwd(c, w_up, xf, out=up_out, accumulate=False)
        else:
            assert w22 is not None  # x_up given: the new rows are W21 and W22 apart (ScaleTERowParallelLinear)
            xu = x_up.reshape(-1, x_up.shape[-1])
            y = _fwd(c, w, xf, out=y_out, accumulate=False)
            y_up = _fwd(c, w_up, xf, out=up_out, accumulate=False)
            _fwd(c, w22, xu, out=y_up)
        if w12 is not None:
            assert xu is not None  # made above wherever W12 exists
            _fwd(c, w12, xu, out=y)
        ctx.save_for_backward(xf, xu, w, w_up, w22, w12)
        ctx.c, ctx.shapes, ctx.whole = c, (x.shape, None if x_up is None else x_up.shape), x_up is None
        y, y_up = _reduce(y, c), _reduce(y_up, c)  # in place on the planes unless scattered
        if out is None:
            out = join(y, y_up)
        return out.view(*_tokens(lead, c, gathered=False), m + m_up)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        xf, xu, w, w_up, w22, w12 = ctx.saved_tensors
        c, m, n = ctx.c, w.shape[0], w.shape[1]
        g_y, g_up = (t.reshape(-1, t.shape[-1]) for t in planes(grad.contiguous(), m))  # views, no copy
        base_needed = not c.skip or w12 is not None
        # dy exists wherever it is read below: without the skip, or with W12 (which the skip refuses)
        dy = _gather(g_y, c) if base_needed else None
        dy_up = _gather(g_up, c)
        gw12 = None
        if w12 is not None:
            assert dy is not None
            gw12 = _wgrad(c, xu, dy, w12)
        if ctx.whole:
            gw_up = _wgrad(c, xf, dy_up, w_up)
            if c.skip:  # dx_up = dy_up W22 only: W22 copied contiguous (m' x n', no activation's size)
                dx = torch.empty_like(xf)
                dx[:, :n].zero_()
                dx[:, n:].copy_(_dgrad(c, w_up[:, n:].contiguous(), dy_up))
            else:
                assert dy is not None
                dx = _dgrad(c, w_up, dy_up)  # [dx; dx_up] from the new rows, one buffer
                dx[:, :n].add_(_dgrad(c, w, dy))
            if w12 is not None:
                assert dy is not None
                dx[:, n:].add_(_dgrad(c, w12, dy))
            return dx.view(ctx.shapes[0]), None, None, gw_up, None, gw12, None
        gw21, gw22 = _wgrad(c, xf, dy_up, w_up), _wgrad(c, xu, dy_up, w22)
        dx_up = _dgrad(c, w22, dy_up)
        if w12 is not None:
            assert dy is not None
            _dgrad(c, w12, dy, out=dx_up)
        dx_base: torch.Tensor | None = None
        if not c.skip:
            assert dy is not None
            dx_base = _dgrad(c, w_up, dy_up)
            _dgrad(c, w, dy, out=dx_base)
            dx_base = dx_base.view(ctx.shapes[0])
        return dx_base, dx_up.view(ctx.shapes[1]), None, gw21, gw22, gw12, None


class _SwiGLUPair(torch.autograd.Function):
    """(y [.., 2f], y_up [.., 2f']) -> TE's SwiGLU of each: (a [.., f], a_up [.., f'])."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, y_up: torch.Tensor, ops: Any) -> Any:
        ctx.save_for_backward(y, y_up)
        ctx.ops = ops
        ctx.set_materialize_grads(False)
        return ops.swiglu(y, None), ops.swiglu(y_up, None)

    @staticmethod
    def backward(ctx: Any, da: torch.Tensor | None, da_up: torch.Tensor | None) -> Any:
        y, y_up = ctx.saved_tensors
        dy = None if da is None else ctx.ops.dswiglu(da.contiguous(), y, None)
        dy_up = None if da_up is None else ctx.ops.dswiglu(da_up.contiguous(), y_up, None)
        return dy, dy_up, None


def _param(shape: tuple[int, ...], config: Any, trainable: bool, fill: float | None = None) -> nn.Parameter:
    t = torch.empty(shape, dtype=config.params_dtype, device=param_device(config))
    if fill is not None:
        t.fill_(fill)
    return nn.Parameter(t, requires_grad=trainable)


class _FusedLinear(nn.Module):
    """State shared by the column and row classes (megatron-core's linear constructor arguments,
    plus `split` and `skip_base_grad`, bound by the layer spec)."""

    def __init__(self, input_size: int, output_size: int, *, split: BlockSplit, config: Any,
                 init_method: Callable[[torch.Tensor], None], tp_group: Any = None, is_expert: bool = False,
                 bias: bool = False, skip_bias_add: bool = False, fuse_wgrad_accumulation: bool = False,
                 skip_base_grad: bool = False, whole_up: bool = False, ops: Any = None) -> None:
        super().__init__()
        if bias or is_expert:
            raise ValueError("upscaled linears are bias-free and not mixture-of-experts (Llama family)")
        if input_size != split.in_base + split.in_up or output_size != split.out_base + split.out_up:
            raise ValueError(f"upscaled linear built as {input_size}->{output_size} but its split is "
                             f"({split.in_base}+{split.in_up})->({split.out_base}+{split.out_up})")
        if getattr(config, "fp8", None):
            raise ValueError("--scale-te-linear fused runs bf16 only so far: FP8 needs --scale-te-linear modules")
        if skip_base_grad and split.adapt:
            raise ValueError("skip_base_grad: W12 (SCALE-Adapt) makes the base stream trainable; Preserve only")
        self.config, self.split = config, split
        self.tp_group = tp_group if tp_group is not None else mc.parallel_state.get_tensor_model_parallel_group()
        self.tp_size, self.tp_rank = mc.get_pg_size(self.tp_group), mc.get_pg_rank(self.tp_group)
        n, n_up, m, m_up = split.local(self.tp_size)
        self.weight = _param((m, n), config, trainable=False)
        self.weight.scale_frozen = True  # type: ignore[attr-defined]  # our parameter tag (Tensor declares none)
        self.whole_up = whole_up
        if whole_up:
            self.weight_up = _param((m_up, n + n_up), config, trainable=True)
            blocks = [self.weight, self.weight_up]
        else:
            self.weight_21 = _param((m_up, n), config, trainable=True)
            self.weight_22 = _param((m_up, n_up), config, trainable=True)
            blocks = [self.weight, self.weight_21, self.weight_22]
        self.weight_12 = _param((m, n_up), config, trainable=True, fill=0.0) if split.adapt else None
        with torch.no_grad():
            for p in blocks:
                init_method(p)
        if self.tp_size > 1:
            for block in [*blocks, self.weight_12]:
                if block is not None:
                    mark_tp(block, split.tp_axis)
        self.ops = te_functional() if ops is None else ops
        self._call = _Call(ops=self.ops, group=self.tp_group, tp=self.tp_size, sp=bool(config.sequence_parallel),
                           skip=skip_base_grad, fuse=fuse_wgrad_accumulation or bool(config.gradient_accumulation_fusion),
                           eps=float(config.layernorm_epsilon))

    def _up_blocks(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return (self.weight_up, None) if self.whole_up else (self.weight_21, self.weight_22)

    def backward_dw(self) -> None:
        """Megatron's delayed weight-gradient hook; weight gradients here are computed eagerly."""

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        """W sharded as megatron-core shards the base; the blocks under the local backend's keys."""
        dp = dp_group(metadata)
        out: dict = mc.make_sharded_tensors_for_checkpoint(
            {"weight": self.weight}, prefix, {"weight": self.split.tp_axis}, sharded_offsets,
            tp_group=self.tp_group, dp_cp_group=dp)
        replica_id, offsets = (0, 0, mc.get_pg_rank(dp)), tuple(sharded_offsets)
        if self.whole_up:
            out.update(expansion_sharded_state_dict(prefix, self.weight_up, self.weight_12, self.split, self.tp_rank,
                                                    self.tp_size, replica_id, offsets))
        else:
            blocks = {W21: self.weight_21, W22: self.weight_22, W12: self.weight_12}
            out.update(blocks_sharded_state_dict(prefix, blocks, self.split, self.tp_rank, self.tp_size, replica_id,
                                                 offsets))
        return out

    def extra_repr(self) -> str:
        s = self.split
        return (f"{s.parallel}, in={s.in_base}+{s.in_up}, out={s.out_base}+{s.out_up}, chunks={s.chunks}, "
                f"adapt={s.adapt}, tp={self.tp_size}, skip_base_grad={self._call.skip}, te_fused")


class ScaleTENormColumnLinear(_FusedLinear):
    """linear_qkv / linear_fc1 with the split norm inside: input the residual [s, b, d + d']
    ([s/tp, b, ..] under SP); gains layer_norm_weight [d] (frozen) and layer_norm_weight_up [d'];
    output [s, b, (m + m')/tp] joined (qkv), or the pair (`pair`, fc1 under ScaleTEMLP)."""

    def __init__(self, input_size: int, output_size: int, *, split: BlockSplit, config: Any,
                 init_method: Callable[[torch.Tensor], None], gather_output: bool = False, bias: bool = False,
                 skip_bias_add: bool = False, is_expert: bool = False, tp_comm_buffer_name: str | None = None,
                 tp_group: Any = None, stride: int = 1, name: str | None = None,
                 fuse_wgrad_accumulation: bool = False, skip_base_grad: bool = False, ops: Any = None,
                 **unused: Any) -> None:
        if split.parallel != "column" or gather_output:
            raise ValueError("ScaleTENormColumnLinear: a column split, output not gathered")
        super().__init__(input_size, output_size, split=split, config=config, init_method=init_method,
                         tp_group=tp_group, is_expert=is_expert, bias=bias, skip_bias_add=skip_bias_add,
                         fuse_wgrad_accumulation=fuse_wgrad_accumulation, skip_base_grad=skip_base_grad, ops=ops)
        self.layer_norm_weight = _param((split.in_base,), config, trainable=False, fill=1.0)
        self.layer_norm_weight_up = _param((split.in_up,), config, trainable=True, fill=1.0)
        self.layer_norm_weight.scale_frozen = True  # type: ignore[attr-defined]  # our parameter tag (Tensor declares none)
        for p in (self.layer_norm_weight, self.layer_norm_weight_up):
            p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)

    def forward(self, input_: torch.Tensor, weight: Any = None, runtime_gather_output: bool | None = None) -> Any:
        raise ValueError("ScaleTENormColumnLinear reads the planar stream and returns (y, y_up): call pair() "
                         "(ScaleTESelfAttention, ScaleTEMLP)")

    def pair(self, input_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(y, y_up) apart from the planar stream: qkv's base and new groups, fc1's [gate; up] rows
        and its new [gate_up; up_up] rows."""
        w21, w22 = self._up_blocks()
        return _NormColumn.apply(input_, self.layer_norm_weight, self.layer_norm_weight_up, self.weight, w21, w22,
                                 self.weight_12, self._call)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        out = super().sharded_state_dict(prefix, sharded_offsets, metadata)
        out.update(mc.make_sharded_tensors_for_checkpoint(  # the local spec's keys (spec.py keys map)
            {"layer_norm_weight": self.layer_norm_weight, "layer_norm_weight_up": self.layer_norm_weight_up},
            prefix, {}, sharded_offsets, tp_group=self.tp_group, dp_cp_group=dp_group(metadata)))
        return out


class ScaleTERowParallelLinear(_FusedLinear):
    """linear_proj (input the attention's [s, b, (n + n')/tp]; [W21 W22] one weight over it) and,
    built by ScaleTEMLP with pair_input, linear_fc2 (input the pair (a, a_up); W21, W22 apart).
    Output [s, b, m + m'] ([s/tp, ..] under SP)."""

    def __init__(self, input_size: int, output_size: int, *, split: BlockSplit, config: Any,
                 init_method: Callable[[torch.Tensor], None], bias: bool = False, input_is_parallel: bool = True,
                 skip_bias_add: bool = False, is_expert: bool = False, tp_comm_buffer_name: str | None = None,
                 tp_group: Any = None, name: str | None = None, fuse_wgrad_accumulation: bool = False,
                 skip_base_grad: bool = False, pair_input: bool = False, ops: Any = None, **unused: Any) -> None:
        if split.parallel != "row" or not input_is_parallel:
            raise ValueError("ScaleTERowParallelLinear: a row split, input already split over TP")
        super().__init__(input_size, output_size, split=split, config=config, init_method=init_method,
                         tp_group=tp_group, is_expert=is_expert, bias=bias, skip_bias_add=skip_bias_add,
                         fuse_wgrad_accumulation=fuse_wgrad_accumulation, skip_base_grad=skip_base_grad,
                         whole_up=not pair_input, ops=ops)

    def forward(self, input_: torch.Tensor) -> tuple[torch.Tensor, None]:
        if not self.whole_up:
            raise ValueError("this linear_fc2 reads the pair (a, a_up): call pair()")
        return _Row.apply(input_, None, self.weight, self.weight_up, None, self.weight_12, self._call), None

    def pair(self, x: torch.Tensor, x_up: torch.Tensor) -> torch.Tensor:
        return _Row.apply(x, x_up, self.weight, self.weight_21, self.weight_22, self.weight_12, self._call)


class ScaleTEMLP(mc.MLP):
    """megatron-core's MLP with its forward as TEFusedMLP's idea for SCALE: fc1 (norm inside) gives
    (y, y_up), TE's SwiGLU each, fc2 reads (a, a_up). Same submodules and checkpoint keys (MLP's
    sharded_state_dict gives linear_fc1.weight its SwiGLU sharding)."""

    def __init__(self, config: Any, submodules: Any, **kwargs: Any) -> None:
        fc2 = partial(submodules.linear_fc2, pair_input=True)
        super().__init__(config=config, submodules=replace(submodules, linear_fc2=fc2), **kwargs)

    def forward(self, hidden_states: torch.Tensor, per_token_scale: Any = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        if per_token_scale is not None:
            raise ValueError("ScaleTEMLP: no per-token scale (not a mixture-of-experts layer)")
        y, y_up = self.linear_fc1.pair(hidden_states)
        a, a_up = _SwiGLUPair.apply(y, y_up, self.linear_fc1.ops)
        return self.linear_fc2.pair(a, a_up), None


class ScaleTESelfAttention(mc.SelfAttention):
    """megatron-core's SelfAttention with its query, key and value taken from linear_qkv's two
    outputs: the base groups' y and the new groups' y_up (one GQA layout each, per rank [groups,
    (heads per group + 2) x head size]) are split as megatron-core splits one, and each of query,
    key and value is the two sets side by side along the heads ([base heads; new heads], the layout
    core attention and linear_proj read). Those three concatenations are the queries' reshape
    megatron-core copies anyway plus the keys and values; nothing joins [y; y_up] nor splits its
    gradient. Everything after (RoPE, core attention, linear_proj) is the parent's."""

    def get_query_key_value_tensors(self, hidden_states: torch.Tensor, key_value_states: Any = None,
                                    output_gate: bool = False, split_qkv: bool = True) -> Any:
        if key_value_states is not None or output_gate or not split_qkv:
            raise ValueError("ScaleTESelfAttention: self-attention without an output gate or the fused "
                             "single-QKV RoPE (--scale-te-linear modules runs those)")
        if self.config.num_query_groups < self.world_size:
            raise ValueError(f"ScaleTESelfAttention: {self.config.num_query_groups} query groups over TP "
                             f"{self.world_size}: SCALE's groups split over the ranks")
        y, y_up = self.linear_qkv.pair(hidden_states)
        if self.linear_qkv._call.skip:  # the base heads' attention runs without autograd (split_attention.py)
            y = y.detach()
        hn = self.hidden_size_per_attention_head
        per_group = self.num_attention_heads_per_partition // self.num_query_groups_per_partition
        parts = []
        for t in (y, y_up):
            grouped = t.view(*t.shape[:-1], t.shape[-1] // ((per_group + 2) * hn), (per_group + 2) * hn)
            parts.append(torch.split(grouped, [per_group * hn, hn, hn], dim=3))
        query, key, value = (torch.cat((a, b), dim=2) for a, b in zip(*parts, strict=True))
        query = query.view(*query.shape[:2], -1, hn)
        if self.q_layernorm is not None:
            query = self.q_layernorm(query)
        if self.k_layernorm is not None:
            key = self.k_layernorm(key)
        return query, key, value


class _PlanarNorm(torch.autograd.Function):
    """The final split norm on the planar stream: TE's rmsnorm on each plane, the output planar."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, g: torch.Tensor, g_up: torch.Tensor, ops: Any, eps: float,
                skip: bool) -> torch.Tensor:
        d = g.shape[0]
        x, x_up = (t.reshape(-1, t.shape[-1]) for t in planes(hidden, d))
        out = torch.empty_like(hidden)
        ln, ln_up = (t.reshape(-1, t.shape[-1]) for t in planes(out, d))  # TE writes each plane in place
        te_dtype = ops.TE_DType[hidden.dtype]
        _, _, rs = ops.rmsnorm_fwd(x, g, eps, ln, None, te_dtype, 0, False)
        _, _, rs_up = ops.rmsnorm_fwd(x_up, g_up, eps, ln_up, None, te_dtype, 0, False)
        ctx.save_for_backward(*((None, None) if skip else (x, rs)), x_up, rs_up, g, g_up)
        ctx.ops, ctx.shape = ops, hidden.shape
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, rs, x_up, rs_up, g, g_up = ctx.saved_tensors
        dz, dz_up = (t.reshape(-1, t.shape[-1]) for t in planes(grad.contiguous(), g.shape[0]))
        dx_up, dg_up = ctx.ops.rmsnorm_bwd(dz_up, x_up, rs_up, g_up, 0, False)
        dx = None if x is None else ctx.ops.rmsnorm_bwd(dz, x, rs, g, 0, False)[0]  # None under the skip: zeros
        return join(dx, dx_up, ctx.shape, g.shape[0]), None, dg_up if g_up.requires_grad else None, None, None, None


class ScaleTEFinalNorm(SplitRMSNorm):
    """The block's final norm on the planar stream (planar.py): SplitRMSNorm's gains and checkpoint
    entries, TE's rmsnorm on each plane in one node, the output planar for the output layer."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, ops: Any = None, **kwargs: Any) -> None:
        super().__init__(config, hidden_size, eps, **kwargs)
        self.ops = te_functional() if ops is None else ops

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return _PlanarNorm.apply(hidden, self.weight, self.weight_up, self.ops, self.eps, self.skip_base_grad)

"""Upscaled tensor-parallel linears: a frozen base partition plus trainable expansion shards.

    [ y    ]   [ W    W12 ] [ x    ]      W frozen (no grad, no optimizer state, no main_grad)
    [ y_up ] = [ W21  W22 ] [ x_up ]      W12 zero, present only where Adapt collaborates
                                          [W21 W22] trainable, one parameter `weight_up`

The base path y = W x is computed by the same matmul megatron-core uses for its own linears, on
the same TP partition, followed (row-parallel) by the same-sized all-reduce, so under Preserve the
original outputs are bitwise those of the base model. The new rows are one GEMM over the whole
local input [x; x_up]; forward and backward are one autograd Function (`fused.py`) that issues no
weight-gradient GEMM for W and accumulates the input gradient in one buffer. Per-rank shapes and
the checkpoint layout are in `partition.py`.

Both classes take megatron-core's linear constructor arguments (LinearQkvBuilder / LinearFc1Builder
protocols) plus the keywords `split: BlockSplit` and `skip_base_grad: bool`, bound by the layer spec
with functools.partial. `skip_base_grad` (--scale-base-backward; refused with W12): the backward
computes no gradient for the base features of the input (zeros there) and none into y, exactly
every trainable one (fused.py's docstring says why that is exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.model.layers.partition import (
    BlockSplit,
    column_input,
    dp_group,
    expansion_sharded_state_dict,
    param_device,
)
from megatron_scale.model.layers.fused import upscaled_gemm


def _param(shape: tuple[int, int], config: Any, trainable: bool) -> nn.Parameter:
    p = nn.Parameter(torch.empty(shape, dtype=config.params_dtype, device=param_device(config)))
    p.requires_grad_(trainable)
    return p


def mark_tp(param: nn.Parameter, dim: int, is_parallel: bool = True) -> None:
    """Tell megatron-core (grad-norm, distributed optimizer) whether this tensor is a TP shard.
    Set directly: Transformer Engine has already marked its own weights (as its dim 0)."""
    param.tensor_model_parallel = is_parallel  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)
    param.partition_dim = dim  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)
    param.partition_stride = 1  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)


class _UpscaledLinear(nn.Module):
    """Shared state of the column- and row-parallel variants."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        split: BlockSplit,
        config: Any,
        init_method: Callable[[torch.Tensor], None],
        tp_group: torch.distributed.ProcessGroup | None,
        is_expert: bool = False,
        bias: bool = False,
        skip_bias_add: bool = False,
        skip_base_grad: bool = False,
    ) -> None:
        super().__init__()
        if bias:
            raise ValueError("upscaled linears are bias-free (Llama family): set add_bias_linear=False")
        if is_expert:
            raise ValueError("upscaled linears do not support mixture-of-experts layers")
        if input_size != split.in_base + split.in_up or output_size != split.out_base + split.out_up:
            raise ValueError(
                f"upscaled linear built as {input_size}->{output_size} but its split is "
                f"({split.in_base}+{split.in_up})->({split.out_base}+{split.out_up})"
            )
        if skip_base_grad and split.adapt:
            raise ValueError("upscaled linear: skip_base_grad with W12 (Adapt): W12's gradient needs the base "
                             "stream's backward (--scale-base-backward)")
        self.config = config
        self.split = split
        self.skip_base_grad = skip_base_grad
        self.skip_bias_add = skip_bias_add
        self.sequence_parallel = config.sequence_parallel
        self.tp_group = tp_group if tp_group is not None else mc.parallel_state.get_tensor_model_parallel_group()
        self.tp_size = mc.get_pg_size(self.tp_group)
        self.tp_rank = mc.get_pg_rank(self.tp_group)
        n, n_up, m, m_up = split.local(self.tp_size)
        self.in_local = n
        self._make_weights(n, n_up, m, m_up, init_method)
        if self.weight_12 is not None:
            with torch.no_grad():
                self.weight_12.zero_()
        self.weight.requires_grad_(False)
        self.weight.scale_frozen = True  # type: ignore[attr-defined]  # our parameter tag (Tensor declares none)

    def _make_weights(self, n: int, n_up: int, m: int, m_up: int, init_method: Callable[[torch.Tensor], None]) -> None:
        """W, weight_up and W12 as parameters of this module (the local backend)."""
        self.weight = _param((m, n), self.config, trainable=False)
        self.weight_up = _param((m_up, n + n_up), self.config, trainable=True)
        self.weight_12 = _param((m, n_up), self.config, trainable=True) if self.split.adapt else None
        with torch.no_grad():
            init_method(self.weight)
            init_method(self.weight_up)
        for p in (self.weight, self.weight_up, self.weight_12):
            if p is not None and self.tp_size > 1:
                mark_tp(p, self.split.tp_axis)

    def _gemm(self, x_full: torch.Tensor, assemble: bool) -> Any:
        """The block matrix on the local input: the interleaved output, or (y, y_up) unreduced."""
        return upscaled_gemm(
            x_full, self.weight, self.weight_up, self.weight_12, chunks=self.split.chunks, assemble=assemble,
            skip_base=self.skip_base_grad,
        )

    def _state_keys(self) -> dict[str, str]:
        """Checkpoint entry name -> this module's state-dict name (the same here)."""
        return {}

    def backward_dw(self) -> None:
        """Megatron's delayed weight-gradient hook; weight grads here are computed eagerly."""

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> dict:
        """W sharded like megatron-core's own linear; the expansion as global blocks (partition.py)."""
        dp = dp_group(metadata)
        out: dict = mc.make_sharded_tensors_for_checkpoint(
            {"weight": self.weight},
            prefix,
            {"weight": self.split.tp_axis},
            sharded_offsets,
            tp_group=self.tp_group,
            dp_cp_group=dp,
        )
        replica_id = (0, 0, mc.get_pg_rank(dp))
        out.update(
            expansion_sharded_state_dict(
                prefix,
                self.weight_up,
                self.weight_12,
                self.split,
                self.tp_rank,
                self.tp_size,
                replica_id,
                tuple(sharded_offsets),
            )
        )
        # Checkpoint keys stay as they are; the dict keys must name this module's own state
        # (a backend may hold the blocks in submodules).
        rename = {prefix + a: prefix + b for a, b in self._state_keys().items()}
        if rename and self.split.chunks == 2:
            # megatron-core's MLP gives `linear_fc1.weight` its SwiGLU sharding by that dict key;
            # under another name the factory is ours to apply.
            single = (metadata or {}).get("singleton_local_shards", False)
            w = prefix + "weight"
            out[w] = mc.apply_swiglu_sharded_factory(out[w], sharded_offsets, single, tp_group=self.tp_group, dp_group=dp)
        return {rename.get(k, k): v for k, v in out.items()}

    def extra_repr(self) -> str:
        s = self.split
        return (
            f"{s.parallel}, in={s.in_base}+{s.in_up}, out={s.out_base}+{s.out_up}, "
            f"chunks={s.chunks}, adapt={s.adapt}, tp={self.tp_size}"
            + (", skip_base_grad" if self.skip_base_grad else "")
        )


class ScaleColumnParallelLinear(_UpscaledLinear):
    """Column-parallel upscaled linear (linear_qkv, linear_fc1).

    Per rank: input [s, b, n + n'] (replicated; [s/tp, b, ...] under sequence parallel),
    W [m/tp, n], weight_up [m'/tp, n + n'], W12 [m/tp, n'];
    output [s, b, (m + m')/tp] laid out chunk by chunk [base_0, up_0, ...] (partition.py)."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        split: BlockSplit,
        config: Any,
        init_method: Callable[[torch.Tensor], None],
        gather_output: bool = False,
        bias: bool = False,
        skip_bias_add: bool = False,
        is_expert: bool = False,
        tp_comm_buffer_name: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        stride: int = 1,
        name: str | None = None,
        skip_base_grad: bool = False,
        **unused: Any,
    ) -> None:
        if split.parallel != "column":
            raise ValueError("ScaleColumnParallelLinear needs a column split")
        super().__init__(
            input_size,
            output_size,
            split=split,
            config=config,
            init_method=init_method,
            tp_group=tp_group,
            is_expert=is_expert,
            bias=bias,
            skip_bias_add=skip_bias_add,
            skip_base_grad=skip_base_grad,
        )
        self.gather_output = gather_output

    def forward(
        self, input_: torch.Tensor, weight: torch.Tensor | None = None, runtime_gather_output: bool | None = None
    ) -> tuple[torch.Tensor, None]:
        if weight is not None:
            raise ValueError("ScaleColumnParallelLinear owns its weights; an external weight is not supported")
        x_full = column_input(input_, self.tp_size, self.sequence_parallel, self.tp_group,
                              self.in_local if self.skip_base_grad else None)
        out = self._gemm(x_full, assemble=True)
        gather = self.gather_output if runtime_gather_output is None else runtime_gather_output
        if gather and self.tp_size > 1:
            out = mc.gather_from_tensor_model_parallel_region(out, group=self.tp_group)
        return out, None


class ScaleRowParallelLinear(_UpscaledLinear):
    """Row-parallel upscaled linear (linear_proj, linear_fc2).

    Per rank: input [s, b, n/tp + n'/tp] = [x_r; x_up_r], W [m, n/tp], weight_up [m', n/tp + n'/tp],
    W12 [m, n'/tp]; output [s, b, m + m'] ([s/tp, ...] under sequence parallel). y and y_up are
    reduced separately so y's all-reduce is the base model's, element for element."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        split: BlockSplit,
        config: Any,
        init_method: Callable[[torch.Tensor], None],
        bias: bool = False,
        input_is_parallel: bool = True,
        skip_bias_add: bool = False,
        is_expert: bool = False,
        tp_comm_buffer_name: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        name: str | None = None,
        skip_base_grad: bool = False,
        **unused: Any,
    ) -> None:
        if split.parallel != "row":
            raise ValueError("ScaleRowParallelLinear needs a row split")
        if not input_is_parallel:
            raise ValueError("ScaleRowParallelLinear expects an input already split over TP ranks")
        super().__init__(
            input_size,
            output_size,
            split=split,
            config=config,
            init_method=init_method,
            tp_group=tp_group,
            is_expert=is_expert,
            bias=bias,
            skip_bias_add=skip_bias_add,
            skip_base_grad=skip_base_grad,
        )

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return t
        if self.sequence_parallel:
            return mc.reduce_scatter_to_sequence_parallel_region(t, group=self.tp_group)
        return mc.reduce_from_tensor_model_parallel_region(t, group=self.tp_group)

    def forward(self, input_: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.tp_size == 1:
            return self._gemm(input_, assemble=True), None
        y, y_up = self._gemm(input_, assemble=False)
        return torch.cat((self._reduce(y), self._reduce(y_up)), dim=-1), None

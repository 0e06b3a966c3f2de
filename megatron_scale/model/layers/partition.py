"""Where each block of an upscaled linear lives on a tensor-parallel rank, and how it is saved.

An upscaled linear is the block matrix

    [ y    ]   [ W    W12 ] [ x    ]        W   [m,  n ]  pre-trained, frozen
    [ y_up ] = [ W21  W22 ] [ x_up ]        W12 [m,  n']  zero; absent unless Adapt
                                            W21 [m', n ], W22 [m', n']  trainable, stored as one
                                            parameter weight_up = [W21 W22]  [m', n+n']

Column-parallel (linear_qkv, linear_fc1, the output layer): rows are split over TP ranks, so rank
r holds W_r [m/tp, n], [W21 W22]_r [m'/tp, n+n'] and W12_r [m/tp, n']. Its local output is the
concatenation, chunk by chunk, of base and new rows. linear_qkv has one chunk (Megatron interleaves
q, k, v per query group, and the new groups come after the rank's base groups); linear_fc1 has two
([gate; up] per rank), so the local output is [gate_r, gate_up_r, up_r, up_up_r]: Megatron's SwiGLU
`chunk(2)` then sees [gate_r; gate_up_r] and [up_r; up_up_r].

Row-parallel (linear_proj, linear_fc2): columns are split, so rank r holds W_r [m, n/tp],
[W21_r W22_r] [m', n/tp + n'/tp] and W12_r [m, n'/tp]; its local input is [x_r; x_up_r].

Checkpoints hold TP-independent global tensors under the module's prefix: `weight` (W, sharded
exactly as megatron-core shards the base, so a base checkpoint's keys load unchanged),
`weight_21`, `weight_22` and, per layer, `weight_12.layer<i>` (the key table: model/weights/keys.py).
`weight_up` is split into its two blocks by a ShardedTensorFactory on save and merged back on
load, so a TP=2 checkpoint loads at TP=1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from megatron_scale import _mcore as mc
from megatron_scale._mcore import ShardedTensor, ShardedTensorFactory
from megatron_scale.model.weights.keys import W12, W21, W22, w12_key

Parallel = Literal["column", "row"]


@dataclass(frozen=True, kw_only=True)
class BlockSplit:
    """Global sizes of the four blocks of one upscaled linear, and how TP splits them."""

    parallel: Parallel
    in_base: int
    """n: original input features."""
    in_up: int
    """n': new input features."""
    out_base: int
    """m: original output features."""
    out_up: int
    """m': new output features."""
    chunks: int = 1
    """Output row chunks per rank (2 for the SwiGLU [gate; up] of linear_fc1)."""
    adapt: bool = False
    """Whether W12 exists (Adapt): trainable, zero-initialised."""

    def local(self, tp: int) -> tuple[int, int, int, int]:
        """(n, n', m, m') as held on one rank of a TP group of size `tp`."""
        n, n_up, m, m_up = self.in_base, self.in_up, self.out_base, self.out_up
        if self.parallel == "column":
            _check_div("output", m, tp * self.chunks)
            _check_div("new output", m_up, tp * self.chunks)
            return n, n_up, m // tp, m_up // tp
        _check_div("input", n, tp)
        _check_div("new input", n_up, tp)
        return n // tp, n_up // tp, m, m_up

    @property
    def tp_axis(self) -> int:
        """Axis of W (and of every block) that TP splits: 0 rows (column), 1 columns (row)."""
        return 0 if self.parallel == "column" else 1


def _check_div(what: str, size: int, by: int) -> None:
    if size % by:
        raise ValueError(f"upscaled linear: {what} size {size} is not divisible by {by}")


def interleave_chunks(base: torch.Tensor, up: torch.Tensor, chunks: int) -> torch.Tensor:
    """Local column-parallel output: [base_0, up_0, base_1, up_1, ...] along the last dim."""
    if chunks == 1:
        return torch.cat((base, up), dim=-1)
    parts: list[torch.Tensor] = []
    for b, u in zip(base.chunk(chunks, dim=-1), up.chunk(chunks, dim=-1), strict=True):
        parts += [b, u]
    return torch.cat(parts, dim=-1)


def _shards(
    key: str,
    tensor: torch.Tensor,
    split: BlockSplit,
    tp_rank: int,
    tp_size: int,
    replica_id: tuple[int, ...],
    prepend: tuple[tuple[int, int, int], ...],
) -> list[ShardedTensor]:
    """One local block as ShardedTensor(s) of the global block `key`.

    Column-parallel blocks with c chunks are c row pieces; piece j of rank r is row block
    j * tp + r of the global tensor cut into c * tp equal blocks (Megatron's SwiGLU rule)."""
    axis = split.tp_axis + len(prepend)
    chunks = split.chunks if split.parallel == "column" else 1
    # One piece is the tensor itself, not a view of it: megatron-core's optimizer finds a
    # parameter's checkpoint entry by the identity of its data.
    pieces = (tensor,) if chunks == 1 else tensor.chunk(chunks, dim=0)
    return [
        ShardedTensor.from_rank_offsets(
            key,
            piece,
            *prepend,
            (axis, j * tp_size + tp_rank, chunks * tp_size),
            replica_id=replica_id,
            prepend_axis_num=len(prepend),
        )
        for j, piece in enumerate(pieces)
    ]


def _merge(pieces: list[torch.Tensor]) -> torch.Tensor:
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)


def expansion_sharded_state_dict(
    prefix: str,
    weight_up: torch.Tensor,
    weight_12: torch.Tensor | None,
    split: BlockSplit,
    tp_rank: int,
    tp_size: int,
    replica_id: tuple[int, ...],
    prepend: tuple[tuple[int, int, int], ...] = (),
) -> dict[str, ShardedTensor | ShardedTensorFactory]:
    """Sharded entries for the trainable blocks: weight_up -> weight_21 + weight_22; weight_12."""
    n_local = split.local(tp_size)[0]

    # Keys come from the factory's `key` at build time: megatron-core rewrites the keys of a
    # layer's entries (decoder.layers.3. -> decoder.layers.) after the layer returns them.
    def build(key: str, t: torch.Tensor, rid: object, flattened_range: object) -> dict:
        if flattened_range is not None:
            raise NotImplementedError("flattened (distributed-optimizer) shards of SCALE blocks")
        stem = key.removesuffix("weight_up")
        w21, w22 = t[:, :n_local], t[:, n_local:]
        return {
            "w21": _shards(stem + W21, w21, split, tp_rank, tp_size, replica_id, prepend),
            "w22": _shards(stem + W22, w22, split, tp_rank, tp_size, replica_id, prepend),
        }

    def merge(loaded: dict) -> torch.Tensor:
        return torch.cat((_merge(loaded["w21"]), _merge(loaded["w22"])), dim=1)

    out: dict[str, ShardedTensor | ShardedTensorFactory] = {
        f"{prefix}weight_up": ShardedTensorFactory(
            f"{prefix}weight_up", weight_up, build, merge, replica_id
        )
    }
    if weight_12 is not None:
        key, pre = w12_key(prefix, prepend), ()
        pieces = _shards(key, weight_12, split, tp_rank, tp_size, replica_id, pre)
        if len(pieces) == 1:
            out[f"{prefix}weight_12"] = pieces[0]
        else:
            out[f"{prefix}weight_12"] = ShardedTensorFactory(
                key,
                weight_12,
                lambda k, t, r, f: _shards(k, t, split, tp_rank, tp_size, replica_id, pre),
                _merge,
                replica_id,
            )
    return out


def blocks_sharded_state_dict(
    prefix: str,
    blocks: Mapping[str, torch.Tensor | None],
    split: BlockSplit,
    tp_rank: int,
    tp_size: int,
    replica_id: tuple[int, ...],
    prepend: tuple[tuple[int, int, int], ...] = (),
) -> dict[str, ShardedTensor | ShardedTensorFactory]:
    """Sharded entries for trainable blocks held as tensors of their own (`weight_21`,
    `weight_22`, `weight_12`: te_fused.py), under the same checkpoint keys as
    expansion_sharded_state_dict gives one `weight_up`, so either layout loads the other's."""
    out: dict[str, ShardedTensor | ShardedTensorFactory] = {}
    for name, tensor in blocks.items():
        if tensor is None:
            continue
        key, pre = (w12_key(prefix, prepend), ()) if name == W12 else (prefix + name, prepend)
        pieces = _shards(key, tensor, split, tp_rank, tp_size, replica_id, pre)
        if len(pieces) == 1:
            out[prefix + name] = pieces[0]
        else:  # pieces are views: a factory keeps the parameter itself as the entry's data
            out[prefix + name] = ShardedTensorFactory(
                key, tensor, lambda k, t, r, f, pre=pre: _shards(k, t, split, tp_rank, tp_size, replica_id, pre),
                _merge, replica_id,
            )
    return out


def param_device(config: Any) -> torch.device:
    """Where a layer allocates its parameters (megatron-core's use_cpu_initialization rule)."""
    return torch.device("cpu") if config.use_cpu_initialization else torch.device(torch.cuda.current_device())


def dp_group(metadata: dict | None) -> Any:
    """The data-parallel group a sharded_state_dict call replicates over."""
    group = (metadata or {}).get("dp_cp_group")
    return group if group is not None else mc.parallel_state.get_data_parallel_group(with_context_parallel=True)


def column_input(x: torch.Tensor, tp_size: int, sequence_parallel: bool, group: Any,
                 base_features: int | None = None) -> torch.Tensor:
    """The full input a column-parallel layer multiplies: all-gathered along the sequence under
    sequence parallelism, else the replicated input (its gradient all-reduced over TP).

    `base_features` n (the base stream's backward skipped, fused.py): the layer hands zeros as the
    gradient of the first n features, so the backward reduces only the others' (n'/(n+n') of the
    bytes); the forward is the same collective."""
    if tp_size == 1:
        return x
    if base_features is not None:
        return _NewFeaturesRegion.apply(x, base_features, sequence_parallel, group)
    if sequence_parallel:
        return mc.gather_from_sequence_parallel_region(x, group=group)
    return mc.copy_to_tensor_model_parallel_region(x, group=group)


class _NewFeaturesRegion(torch.autograd.Function):
    """column_input's region whose backward reduces the gradient of the features past `n` only
    and hands zeros for the first n (megatron-core's own collectives, called on the new columns)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, n: int, sequence_parallel: bool, group: Any
    ) -> torch.Tensor:
        ctx.n, ctx.sequence_parallel, ctx.group = n, sequence_parallel, group
        if sequence_parallel:
            return mc.gather_from_sequence_parallel_region(x, group=group)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        n = ctx.n
        new = grad[..., n:].contiguous()
        if ctx.sequence_parallel:
            new = mc.reduce_scatter_to_sequence_parallel_region(new, group=ctx.group)
        else:
            new = mc.reduce_from_tensor_model_parallel_region(new, group=ctx.group)
        out = new.new_empty(*new.shape[:-1], grad.shape[-1])
        out[..., :n].zero_()
        out[..., n:].copy_(new)
        return out, None, None, None

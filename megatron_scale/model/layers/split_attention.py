"""Core attention in two calls when the base stream's backward is skipped (issue 62): the base
heads without autograd, the new heads with it.

SCALE's attention is laid out per tensor-parallel rank as [base heads; new heads] over
[base groups; new groups] at the base's GQA ratio, so grouped attention sends base heads only to
base K/V and new heads only to new K/V (sdpa.py): the two sets of heads are independent, and one
call over all of them is the two calls side by side, their contexts concatenated in the layout
linear_proj reads ([base heads; new heads]). Under the skip nobody reads the gradient of the
base heads' Q, K and V (linear_qkv's base rows take no dgrad: fused.py), so the base call runs
under torch.no_grad(): no backward through it, and nothing kept for one (on megatron-core's
local path, the [b, h, s, s] probabilities of h of the h + h' heads; SDPA's saved output and
log-sum-exp of those heads).

`BaseHeadsApart` wraps whichever core attention the backend names (megatron-core's
DotProductAttention, SDPAttention, Transformer Engine's DotProductAttention): two instances, each
built with a config of its own heads and groups and otherwise the layer's (head size, softmax
scale, layer number, mask type). The base instance sees exactly the base model's heads per rank,
so its call is the base model's. It holds no parameters and adds no checkpoint entry (its
sharded_state_dict is empty, as a vanilla-softmax attention's is), so checkpoints written with
and without the skip are the same. Attention
dropout, which Llama trains without, draws apart for the two calls (a different draw of the same
distribution).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from megatron_scale import _mcore as mc


def _heads(t: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """Heads [start, start + count) of [s, b, heads, d] (or thd's [t, heads, d]), contiguous:
    megatron-core's local attention views K and V across (b, heads)."""
    return t.narrow(-2, start, count).contiguous()


class _NewHeads(torch.autograd.Function):
    """The new heads of query, key and value ([.., heads, d]; from heads h, groups g on), each
    contiguous, as one autograd node (where narrow and contiguous would be two per tensor); the
    backward places each gradient after zeros for the base heads, as a slice's backward does."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: int, g: int) -> Any:
        ctx.meta = [(t.shape, s) for t, s in ((q, h), (k, g), (v, g))]
        return tuple(_heads(t, s, t.shape[-2] - s) for t, s in ((q, h), (k, g), (v, g)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        dims = [torch.ops.aten.slice_backward(gr, shape, gr.dim() - 2, s, shape[-2], 1)
                for gr, (shape, s) in zip(grads, ctx.meta, strict=True)]
        return (*dims, None, None)


class BaseHeadsApart(nn.Module):
    """Core attention over [base heads; new heads] as two calls, the base one without autograd.

    Per rank: query [s, b, (h + h')/tp, k], key and value [s, b, (g + g')/tp, k] ->
    context [s, b, (h + h')/tp * k]."""

    def __init__(
        self,
        *,
        inner: Callable[..., nn.Module],
        base_heads: int,
        base_groups: int,
        config: Any,
        pg_collection: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        heads, groups = config.num_attention_heads, config.num_query_groups
        if config.softmax_type != "vanilla":  # a per-head softmax offset would be split across two modules
            raise ValueError(f"BaseHeadsApart: softmax_type {config.softmax_type!r} is not supported; "
                             "give --scale-base-backward full")
        if not (0 < base_heads < heads and 0 < base_groups < groups):
            raise ValueError(f"BaseHeadsApart: base heads/groups {base_heads}/{base_groups} must lie inside the "
                             f"layer's {heads}/{groups}")
        tp_group = (pg_collection.tp if pg_collection is not None
                    else mc.parallel_state.get_tensor_model_parallel_group())
        tp = mc.get_pg_size(tp_group)

        def build(h: int, g: int) -> nn.Module:
            own = dataclasses.replace(config, num_attention_heads=h, num_query_groups=g)
            return inner(config=own, pg_collection=pg_collection, **kwargs)

        self.base = build(base_heads, base_groups)
        self.new = build(heads - base_heads, groups - base_groups)
        self.base_heads_local, self.base_groups_local = base_heads // tp, base_groups // tp
        self.new_heads_local, self.new_groups_local = (heads - base_heads) // tp, (groups - base_groups) // tp

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: Any = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        if attention_bias is not None:
            raise ValueError("BaseHeadsApart: an attention bias is not supported (--scale-base-backward full)")
        h, g = self.base_heads_local, self.base_groups_local
        kw = {"attn_mask_type": attn_mask_type, "attention_bias": None, "packed_seq_params": packed_seq_params,
              **kwargs}
        with torch.no_grad():
            base = self.base(_heads(query, 0, h), _heads(key, 0, g), _heads(value, 0, g), attention_mask, **kw)
        q_new, k_new, v_new = _NewHeads.apply(query, key, value, h, g)
        new = self.new(q_new, k_new, v_new, attention_mask, **kw)
        return torch.cat((base, new), dim=-1)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        """No checkpoint entry, as the one attention it stands for has none (vanilla softmax);
        megatron-core's default would save the TE children's `_extra_state` under new names."""
        return {}

    def extra_repr(self) -> str:
        return f"base heads/groups per rank {self.base_heads_local}/{self.base_groups_local} without autograd"

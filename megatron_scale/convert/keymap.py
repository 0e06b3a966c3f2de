"""The Hugging Face Llama <-> megatron-core key map, from the one key table (model/weights/keys.py).

megatron-core checkpoint keys are global and stack the layers on a leading axis
(`decoder.layers.<name>` [L, ...]); HF keys are per layer (`model.layers.<i>.<name>`). The table,
with how each megatron-core tensor is made of its HF tensors, is `model/weights/keys.py:BASE`.

The norms: megatron-core's local spec builds `input_layernorm` / `pre_mlp_layernorm` modules
but maps them to the `linear_qkv.layer_norm_` / `linear_fc1.layer_norm_` checkpoint keys (its
sharded_state_dict_keys_map), the keys the TE spec uses too; checkpoints only ever see those.
linear_qkv is interleaved per query group (model/weights/layout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.weights.keys import BASE, HF_LAYER, LAYERS, OUTPUT, Entry
from megatron_scale.model.weights.layout import merge_qkv, split_gate_up, split_qkv

__all__ = ["HF_LAYER", "LAYERS", "Entry", "hf_names", "hf_shapes", "hf_to_megatron", "megatron_shapes",
           "megatron_to_hf", "split", "table", "to_hf", "to_megatron"]


def table(args: LlamaArgs) -> list[Entry]:
    """The base tensors of this model (no output layer when it is tied to the embedding)."""
    return [e for e in BASE if not (args.tied and e.megatron == OUTPUT)]


def hf_names(entry: Entry, layer: int | None) -> tuple[str, ...]:
    prefix = HF_LAYER.format(layer) if entry.stacked else ""
    return tuple(prefix + name for name in entry.hf)


def to_megatron(entry: Entry, parts: tuple[torch.Tensor, ...], args: LlamaArgs) -> torch.Tensor:
    """HF tensors (one layer) -> the megatron-core tensor (one layer)."""
    if entry.how == "qkv":
        return merge_qkv(*parts, args.num_query_groups, args.kv_channels)
    if entry.how == "gate_up":
        return torch.cat(parts, dim=0)
    return parts[0]


def split(how: str, tensor: torch.Tensor, groups: int, head_dim: int) -> tuple[torch.Tensor, ...]:
    """One layer's rows -> the row groups HF keeps apart (`how` of a key-table entry; `groups`:
    the query groups the rows hold)."""
    if how == "qkv":
        return split_qkv(tensor, groups, head_dim)
    if how == "gate_up":
        return split_gate_up(tensor)
    return (tensor,)


def to_hf(entry: Entry, tensor: torch.Tensor, args: LlamaArgs) -> tuple[torch.Tensor, ...]:
    """The megatron-core tensor (one layer) -> its HF tensors."""
    return split(entry.how, tensor, args.num_query_groups, args.kv_channels)


def megatron_shapes(args: LlamaArgs) -> dict[str, tuple[int, ...]]:
    """Global checkpoint shapes of a megatron-core Llama GPTModel."""
    d, L, k = args.hidden_size, args.num_layers, args.kv_channels
    h, g, f, V = args.num_attention_heads, args.num_query_groups, args.ffn_hidden_size, args.vocab_size
    per_layer = {
        "self_attention.linear_qkv.layer_norm_weight": (d,),
        "self_attention.linear_qkv.weight": ((h + 2 * g) * k, d),
        "self_attention.linear_proj.weight": (d, h * k),
        "mlp.linear_fc1.layer_norm_weight": (d,),
        "mlp.linear_fc1.weight": (2 * f, d),
        "mlp.linear_fc2.weight": (d, f),
    }
    shapes = {LAYERS + n: (L, *s) for n, s in per_layer.items()}
    shapes["embedding.word_embeddings.weight"] = (V, d)
    shapes["decoder.final_layernorm.weight"] = (d,)
    if not args.tied:
        shapes["output_layer.weight"] = (V, d)
    return shapes


def hf_shapes(args: LlamaArgs) -> dict[str, tuple[int, ...]]:
    """Shapes of a LlamaForCausalLM state dict (without lm_head when tied)."""
    d, k = args.hidden_size, args.kv_channels
    h, g, f, V = args.num_attention_heads, args.num_query_groups, args.ffn_hidden_size, args.vocab_size
    per_layer = {
        "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
        "self_attn.q_proj.weight": (h * k, d), "self_attn.k_proj.weight": (g * k, d),
        "self_attn.v_proj.weight": (g * k, d), "self_attn.o_proj.weight": (d, h * k),
        "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d), "mlp.down_proj.weight": (d, f),
    }
    shapes = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,)}
    for i in range(args.num_layers):
        shapes.update({HF_LAYER.format(i) + n: s for n, s in per_layer.items()})
    if not args.tied:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def hf_to_megatron(get: Callable[[str], torch.Tensor], args: LlamaArgs) -> Iterator[tuple[str, torch.Tensor]]:
    """(megatron key, global tensor) for every megatron-core tensor; `get(hf_name)` reads one HF
    tensor. Eager: meant for key tables and small models (to_megatron.py reads lazily)."""
    for entry in table(args):
        if not entry.stacked:
            yield entry.megatron, to_megatron(entry, tuple(get(n) for n in hf_names(entry, None)), args)
            continue
        layers = [
            to_megatron(entry, tuple(get(n) for n in hf_names(entry, i)), args) for i in range(args.num_layers)
        ]
        yield entry.megatron, torch.stack(layers)


def megatron_to_hf(get: Callable[[str], torch.Tensor], args: LlamaArgs) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) for every LlamaForCausalLM tensor; `get(key)` reads one global
    megatron-core tensor (called once per key, in table order)."""
    for entry in table(args):
        tensor = get(entry.megatron)
        for i in range(args.num_layers) if entry.stacked else [None]:
            parts = to_hf(entry, tensor[i] if i is not None else tensor, args)
            yield from zip(hf_names(entry, i), parts, strict=True)

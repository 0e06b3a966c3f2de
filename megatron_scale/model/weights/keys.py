"""Checkpoint keys of a (SCALE) Llama GPTModel and their Hugging Face names, as one table.

megatron-core checkpoint keys are global and stack the layers on a leading axis
(`decoder.layers.<name>` [L, ...]); HF keys are per layer (`model.layers.<i>.<name>`).

Base tensors (`BASE`, in the order conversion writes them; convert/keymap.py maps them):

    megatron-core (checkpoint key)                  HF LlamaForCausalLM                 how
    embedding.word_embeddings.weight                model.embed_tokens.weight           copy
    decoder.layers.self_attention.linear_qkv.layer_norm_weight   input_layernorm.weight copy
    decoder.layers.self_attention.linear_qkv.weight q_proj, k_proj, v_proj              qkv
    decoder.layers.self_attention.linear_proj.weight  o_proj                            copy
    decoder.layers.mlp.linear_fc1.layer_norm_weight post_attention_layernorm.weight     copy
    decoder.layers.mlp.linear_fc1.weight            gate_proj, up_proj                  gate_up
    decoder.layers.mlp.linear_fc2.weight            down_proj                           copy
    decoder.final_layernorm.weight                  model.norm.weight                   copy
    output_layer.weight                             lm_head.weight  (absent when tied)  copy

SCALE expansion tensors, named after their base tensor on both sides:
    per linear (`LINEARS`)   <linear>.weight_21, .weight_22 (the new rows, split at the base input
                             width) and, where Adapt collaborates, <linear>.weight_12.layer<i>
                             (keyed per layer, `w12_key`; HF: <module>.weight_12 of layer i)
    `UPS`                    <norm / embedding / output>.weight_up (the output layer's even when
                             the base ties it to the embedding)
hf_modeling/modeling_scale_llama.py spells the HF side itself: it is copied into exported folders
and must import nothing from this package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LAYERS = "decoder.layers."
HF_LAYER = "model.layers.{}."
EMBEDDING = "embedding.word_embeddings.weight"
FINAL_NORM = "decoder.final_layernorm.weight"
OUTPUT = "output_layer.weight"
QKV_NORM = LAYERS + "self_attention.linear_qkv.layer_norm_weight"
FC1_NORM = LAYERS + "mlp.linear_fc1.layer_norm_weight"

W21, W22, W12, UP = "weight_21", "weight_22", "weight_12", "_up"


@dataclass(frozen=True)
class Entry:
    """One megatron-core tensor and the HF tensors it is made of."""

    megatron: str
    hf: tuple[str, ...]
    how: str  # copy | qkv | gate_up
    stacked: bool


@dataclass(frozen=True)
class Linear:
    """One linear of a layer: where its parameters sit and the HF modules of its row groups."""

    name: str
    """qkv | proj | fc1 | fc2 (the names ScaleDims.adapt_modules uses)."""
    prefix: str
    """Checkpoint key prefix of its parameters: `decoder.layers.<path>.`."""
    hf: tuple[str, ...]
    """HF modules of its row groups (one layer, under HF_LAYER)."""
    how: str
    """How the HF row groups make its rows: copy | qkv | gate_up."""


LINEARS: dict[str, Linear] = {
    lin.name: lin
    for lin in (
        Linear("qkv", LAYERS + "self_attention.linear_qkv.",
               ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "qkv"),
        Linear("proj", LAYERS + "self_attention.linear_proj.", ("self_attn.o_proj",), "copy"),
        Linear("fc1", LAYERS + "mlp.linear_fc1.", ("mlp.gate_proj", "mlp.up_proj"), "gate_up"),
        Linear("fc2", LAYERS + "mlp.linear_fc2.", ("mlp.down_proj",), "copy"),
    )
}


def _weight(lin: Linear) -> Entry:
    return Entry(lin.prefix + "weight", tuple(m + ".weight" for m in lin.hf), lin.how, True)


BASE: tuple[Entry, ...] = (
    Entry(EMBEDDING, ("model.embed_tokens.weight",), "copy", False),
    Entry(QKV_NORM, ("input_layernorm.weight",), "copy", True),
    _weight(LINEARS["qkv"]),
    _weight(LINEARS["proj"]),
    Entry(FC1_NORM, ("post_attention_layernorm.weight",), "copy", True),
    _weight(LINEARS["fc1"]),
    _weight(LINEARS["fc2"]),
    Entry(FINAL_NORM, ("model.norm.weight",), "copy", False),
    Entry(OUTPUT, ("lm_head.weight",), "copy", False),
)
_BY_KEY = {e.megatron: e for e in BASE}


def _up(key: str) -> Entry:
    e = _BY_KEY[key]
    return Entry(e.megatron + UP, tuple(n + UP for n in e.hf), "copy", e.stacked)


UPS: tuple[Entry, ...] = tuple(_up(k) for k in (QKV_NORM, FC1_NORM, FINAL_NORM, EMBEDDING, OUTPUT))


def w12_key(prefix: str, prepend: tuple[tuple[int, int, int], ...]) -> str:
    """Checkpoint key of W12. megatron-core stacks a block's layers on a leading axis, and a
    stacked tensor must be complete; W12 exists only in the layers Adapt chose, so it is keyed
    per global layer instead: `<prefix>weight_12.layer<i>`."""
    if not prepend:
        return f"{prefix}{W12}"
    if len(prepend) != 1 or prepend[0][0] != 0:
        raise NotImplementedError(f"W12 under sharded offsets {prepend}")
    return f"{prefix}{W12}.layer{prepend[0][1]}"


def w12_layer(key: str, lin: Linear) -> int | None:
    """The layer of a checkpoint key `w12_key` made for `lin`, else None."""
    m = re.fullmatch(re.escape(lin.prefix + W12) + r"\.layer(\d+)", key)
    return int(m.group(1)) if m else None

"""A base model's global state dict -> the SCALE model's global state dict.

Keys are checkpoint keys (model/weights/keys.py): the base keys keep their names, shapes and values, and
the expansion adds, per upscaled linear, `weight_21` / `weight_22` (init.py) and, where Adapt
collaborates, `weight_12.layer<i>` = 0; per split norm `..._up` = 1; `embedding...weight_up` = 0
and `output_layer.weight_up` = 0. New rows are initialised per row group: q, k and v of the new
query groups from the base's q, k and v (re-interleaved as megatron-core lays out linear_qkv), gate
and up of the new SwiGLU units from the base's gate and up. Deterministic for ScaleDims.seed.
A freshly built SCALE model is filled from its base by `load_upscaled`.
"""

from __future__ import annotations

import torch
from torch import nn

from megatron_scale.scale_config import ScaleDims
from megatron_scale.model.weights.keys import EMBEDDING, FC1_NORM, FINAL_NORM, LINEARS, OUTPUT, QKV_NORM, UP, W21, W22, w12_key
from megatron_scale.model.weights.layout import merge_qkv, split_gate_up, split_qkv
from megatron_scale.model.layers.spec import block_splits
from megatron_scale.model.weights.state import load_global_state_dict
from megatron_scale.upscale.init import new_rows


def _expansion_rows(module: str, w: torch.Tensor, dims: ScaleDims, in_up: int, gen: torch.Generator) -> torch.Tensor:
    def make(block: torch.Tensor, count: int) -> torch.Tensor:
        return new_rows(block, count, in_up, dims.init, dims.init_std, gen)

    if module == "qkv":
        k = dims.head_dim
        q, kk, v = split_qkv(w, dims.groups, k)
        ratio = dims.heads // dims.groups
        return merge_qkv(
            make(q, dims.groups_up * ratio * k), make(kk, dims.groups_up * k),
            make(v, dims.groups_up * k), dims.groups_up, k,
        )
    if module == "fc1":
        gate, up = split_gate_up(w)
        return torch.cat((make(gate, dims.ffn_up), make(up, dims.ffn_up)), dim=0)
    return make(w, dims.hidden_up)


def upscale_state_dict(base: dict[str, torch.Tensor], dims: ScaleDims) -> dict[str, torch.Tensor]:
    """The SCALE global state dict for `base` (not modified; its tensors are reused as is)."""
    emb = EMBEDDING
    if emb not in base:
        raise KeyError(f"base state dict has no {emb!r}: not a megatron-core GPT checkpoint")
    vocab, d = base[emb].shape
    if d != dims.hidden:
        raise ValueError(f"base hidden size {d} != ScaleDims.hidden {dims.hidden}")
    dtype = base[emb].dtype
    gen = torch.Generator().manual_seed(dims.seed)
    out = dict(base)
    out[emb + UP] = torch.zeros(vocab, dims.hidden_up, dtype=dtype)
    out[OUTPUT + UP] = torch.zeros(vocab, dims.hidden_up, dtype=dtype)
    out[FINAL_NORM + UP] = torch.ones(dims.hidden_up, dtype=dtype)
    for norm in (QKV_NORM, FC1_NORM):
        out[norm + UP] = torch.ones(dims.num_layers, dims.hidden_up, dtype=dtype)
    for module, lin in LINEARS.items():
        key = lin.prefix
        if key + "weight" not in base:
            raise KeyError(f"base state dict has no {key + 'weight'!r}")
        stacked = base[key + "weight"]
        w21, w22 = [], []
        for layer in range(dims.num_layers):
            split = block_splits(dims, layer)[module]
            rows = _expansion_rows(module, stacked[layer], dims, split.in_up, gen)
            w21.append(rows[:, : split.in_base])
            w22.append(rows[:, split.in_base :])
            if split.adapt:
                out[w12_key(key, ((0, layer, dims.num_layers),))] = torch.zeros(
                    split.out_base, split.in_up, dtype=dtype
                )
        out[key + W21] = torch.stack(w21)
        out[key + W22] = torch.stack(w22)
    return out


def load_upscaled(model: nn.Module, base: dict[str, torch.Tensor]) -> None:
    """Fill a freshly built SCALE model (this rank's shards) from a base global state dict."""
    load_global_state_dict(model, upscale_state_dict(base, model.scale_dims), strict=True)  # type: ignore[arg-type]  # model.scale_dims is set by the SCALE builder, which nn.Module's type does not know

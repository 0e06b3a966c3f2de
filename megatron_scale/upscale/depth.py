"""LLaMA-Pro depth expansion (Wu et al., 2024), the baseline SCALE is compared against.

A base of L layers becomes L + P: after every group of L/P layers a copy of the group's last
layer is inserted, with its attention output projection and FFN down projection zeroed, so the
new block adds nothing to the residual stream and the expanded model computes the base function.
Only the inserted blocks train. Pure tensors on global (checkpoint-key) state dicts.
"""

from __future__ import annotations

import torch

from megatron_scale.model.weights.keys import LAYERS
ZEROED = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")


def new_block_indices(base_layers: int, blocks: int) -> list[int]:
    """0-based indices, in the expanded model, of the inserted blocks."""
    if blocks < 1 or base_layers % blocks:
        raise ValueError(f"--llama-pro-blocks {blocks} must divide --num-layers {base_layers}")
    group = base_layers // blocks
    return [(g + 1) * (group + 1) - 1 for g in range(blocks)]


def expand_depth(base: dict[str, torch.Tensor], base_layers: int, blocks: int) -> dict[str, torch.Tensor]:
    """The expanded model's global state dict; layer-stacked tensors grow from L to L + P."""
    inserted = set(new_block_indices(base_layers, blocks))
    source: list[int] = []  # expanded index -> base layer it copies
    layer = 0
    for i in range(base_layers + blocks):
        source.append(layer - 1 if i in inserted else layer)
        layer += i not in inserted
    out = {}
    for key, value in base.items():
        if not key.startswith(LAYERS):
            out[key] = value
            continue
        if value.shape[0] != base_layers:
            raise ValueError(f"{key}: expected {base_layers} stacked layers, got {tuple(value.shape)}")
        stacked = value[source].clone()
        if key.removeprefix(LAYERS) in ZEROED:
            stacked[sorted(inserted)] = 0
        out[key] = stacked
    return out

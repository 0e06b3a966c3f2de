"""LLaMA-Pro (Wu et al., 2024): zero-output copies of layers inserted into the base
(upscale/depth.py); only those train."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from megatron_scale.flags import flag
from megatron_scale.methods.base import Given, TrainingMethod
from megatron_scale.model.args import LlamaArgs
from megatron_scale.upscale.depth import expand_depth, new_block_indices


def default_llama_pro_blocks(base_layers: int) -> int:
    """The divisor of `base_layers` nearest to a quarter of it (the smaller one on a tie)."""
    divisors = [d for d in range(1, base_layers + 1) if base_layers % d == 0]
    return min(divisors, key=lambda d: (abs(d - base_layers / 4), d))


@dataclass(kw_only=True)
class LlamaProFlags:
    """--method llama-pro's settings."""

    llama_pro_blocks: int | None = field(default=None, metadata=flag("--llama-pro-blocks"))
    """llama-pro: blocks inserted (default num-layers/4); --num-layers stays the base's."""

    def pro_blocks(self, base_layers: int) -> int:
        """--llama-pro-blocks, or by default the divisor of the base's layer count nearest to a
        quarter of it (LLaMA-Pro interleaves one new block after every layers/blocks layers:
        8 for 32 layers, 6 for SmolLM2's 30, where 30 // 4 = 7 would not divide)."""
        if self.llama_pro_blocks is not None:
            if self.llama_pro_blocks < 1 or base_layers % self.llama_pro_blocks:
                raise ValueError(f"--llama-pro-blocks {self.llama_pro_blocks} must divide the base's "
                                 f"{base_layers} layers (one new block after every layers/blocks)")
            return self.llama_pro_blocks
        return default_llama_pro_blocks(base_layers)


def train_only_layers(model: Any, layers: set[int]) -> None:
    """Freeze every parameter except those of the given (global, 0-based) layers."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.decoder.layers:
        if layer.layer_number - 1 in layers:
            for p in layer.parameters():
                p.requires_grad_(True)


@dataclass(kw_only=True, frozen=True)
class LlamaPro(TrainingMethod):
    """LLaMA-Pro: `blocks` zero-output copies of layers inserted into the base; only those train."""

    names = ("llama-pro",)
    trains = "the blocks it inserts between the base's layers"
    flags = LlamaProFlags
    loaded_as = "base+depth"

    blocks: int

    @classmethod
    def base_layers_of(cls, recorded: int, flags: Any) -> int:
        """The base's layers of a resumed run whose record counts the grown model."""
        if flags.llama_pro_blocks is not None:
            return recorded - flags.llama_pro_blocks
        bases = [n for n in range(1, recorded) if n + default_llama_pro_blocks(n) == recorded]
        if len(bases) == 1:
            return bases[0]
        why = "no" if not bases else f"more than one ({' or '.join(map(str, bases))} layers)"
        raise ValueError(f"--load: {recorded} layers is {why} default LLaMA-Pro growth of a base; "
                         "give --num-layers and --llama-pro-blocks")

    @classmethod
    def grown_layers(cls, base_layers: int, flags: Any) -> int:
        return base_layers + flags.pro_blocks(base_layers)

    @classmethod
    def plan(cls, given: Given) -> LlamaPro:
        return cls(blocks=given.flags.pro_blocks(given.arch.num_layers))

    def model_layers(self, base_layers: int) -> int:
        return base_layers + self.blocks

    def prepare(self, model: Any, args: LlamaArgs) -> None:
        train_only_layers(model, set(new_block_indices(args.num_layers, self.blocks)))

    def initial_state(self, base: dict[str, torch.Tensor], base_layers: int) -> dict[str, torch.Tensor]:
        return expand_depth(base, base_layers, self.blocks)

"""Freeze: the input embedding (and a tied output layer) and the bottom layers frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from megatron_scale.flags import flag
from megatron_scale.methods.base import Given, TrainingMethod
from megatron_scale.model.args import LlamaArgs


@dataclass(kw_only=True)
class FreezeFlags:
    """--method freeze's settings."""

    freeze_layers: int = field(default=3, metadata=flag("--freeze-layers"))
    """freeze: the bottom layers frozen (+ the input embedding)."""


def freeze_bottom(model: Any, layers: int) -> None:
    """Freeze the input embedding and the `layers` lowest transformer layers (global index).

    With tied embeddings the output layer is the same tensor: at PP=1 it is frozen with the
    embedding, and under pipeline parallelism the last stage's copy must be frozen too, or
    megatron-core's embedding-gradient all-reduce runs on one stage only and hangs."""
    if hasattr(model, "embedding"):
        for p in model.embedding.parameters():
            p.requires_grad_(False)
    if model.share_embeddings_and_output_weights and getattr(model, "output_layer", None) is not None:
        if model.output_layer.weight is not None:
            model.output_layer.weight.requires_grad_(False)
    for layer in model.decoder.layers:
        if layer.layer_number - 1 < layers:
            for p in layer.parameters():
                p.requires_grad_(False)


@dataclass(kw_only=True, frozen=True)
class Freeze(TrainingMethod):
    """The input embedding (and a tied output layer) and the `layers` lowest layers frozen."""

    names = ("freeze",)
    trains = "the base model's own weights above the frozen layers"
    flags = FreezeFlags

    layers: int = 3

    @classmethod
    def plan(cls, given: Given) -> Freeze:
        layers, base = given.flags.freeze_layers, given.arch.num_layers
        if not 0 <= layers <= base:
            raise ValueError(f"--freeze-layers {layers} must lie in 0..--num-layers {base}")
        return cls(layers=layers)

    def prepare(self, model: Any, args: LlamaArgs) -> None:
        freeze_bottom(model, self.layers)

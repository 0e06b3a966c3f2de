"""The continual pre-training methods, one tagged choice: what a model is built as and what trains.

    ScaleConfig (config.py)   SCALE-Preserve | -Adapt | -Route: the widened model; the base frozen
    ScaleDims (config.py)     the same, at a geometry already resolved (a checkpoint's record)
    Full                      megatron-core's GPTModel, every weight trains
    Freeze                    the input embedding and the bottom `layers` layers frozen
    LlamaPro                  `blocks` identity blocks inserted (upscale/depth.py); only they train
    LoraSettings (lora.py)    LoRA on the four linears of every layer; only the adapters train
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megatron_scale.config import ScaleConfig, ScaleDims
from megatron_scale.model.lora import LoraSettings


@dataclass(kw_only=True, frozen=True)
class Full:
    """Full fine-tuning: every weight trains."""


@dataclass(kw_only=True, frozen=True)
class Freeze:
    """The input embedding (and a tied output layer) and the `layers` lowest layers frozen."""

    layers: int = 3


@dataclass(kw_only=True, frozen=True)
class LlamaPro:
    """LLaMA-Pro: `blocks` zero-output copies of layers inserted into the base; only those train."""

    blocks: int


Method = ScaleConfig | ScaleDims | Full | Freeze | LlamaPro | LoraSettings


def recorded_method(dims: ScaleDims | None, lora: dict[str, Any] | None) -> Method:
    """The method a checkpoint's records describe: its SCALE geometry, its LoRA rank and alpha,
    or neither (a plain model, built as `Full`)."""
    if dims is not None:
        return dims
    if lora is not None:
        return LoraSettings(rank=int(lora["rank"]), alpha=float(lora["alpha"]))
    return Full()


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


def train_only_layers(model: Any, layers: set[int]) -> None:
    """Freeze every parameter except those of the given (global, 0-based) layers."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.decoder.layers:
        if layer.layer_number - 1 in layers:
            for p in layer.parameters():
                p.requires_grad_(True)

"""One call from a base TransformerConfig and a ScaleConfig (or a recorded ScaleDims) to an
upscaled megatron-core GPTModel.

    model = build_scale_gpt(base_config, ScaleConfig(variant="preserve"), vocab_size=V,
                            max_sequence_length=S, tied_embeddings=True)
    model = build_scale_gpt(base_config, ScaleDims.from_record(record, where=...), ...)

The model is megatron-core's GPTModel at the widened sizes, built from the SCALE layer spec, with
its word embedding and output layer replaced by the two-table versions (heads.py). Every SCALE
setting is checked before any module exists. Fresh from the builder the base blocks hold random
values and every block that touches the base path is zero; `upscale.load_upscaled` fills them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleConfig, ScaleDims, check_router
from megatron_scale.model.heads import ScaleOutputLayer, ScaleVocabParallelEmbedding
from megatron_scale.model.spec import LOCAL, ScaleBackend, get_scale_block_spec


class ScaleGPTModel(mc.GPTModel):
    """megatron-core GPTModel at the widened sizes; `scale_dims` holds the geometry."""

    def __init__(
        self,
        dims: ScaleDims,
        config: Any,
        block_spec: Any,
        *,
        vocab_size: int,
        max_sequence_length: int,
        tied_embeddings: bool,
        **gpt_kwargs: Any,
    ) -> None:
        super().__init__(
            config,
            block_spec,
            vocab_size,
            max_sequence_length,
            share_embeddings_and_output_weights=tied_embeddings,
            **gpt_kwargs,
        )
        self.scale_dims = dims
        tp_group = self.pg_collection.tp
        if self.pre_process:
            old = self.embedding.word_embeddings
            self.embedding.word_embeddings = ScaleVocabParallelEmbedding(
                vocab_size, dims.hidden, dims.hidden_up, config=config, tp_group=tp_group,
                reduce_scatter_embeddings=old.reduce_scatter_embeddings,
            )
            self.embedding.word_embeddings.weight.is_embedding_or_output_parameter = True
        if self.post_process:
            self.output_layer = ScaleOutputLayer(
                vocab_size, dims.hidden, dims.hidden_up, config=config, tp_group=tp_group,
                # A last stage without the embedding holds its own frozen copy of E; megatron-core
                # keys it to the embedding's checkpoint entry (a replica) and skips its all-reduce,
                # as it has no gradient.
                tied=tied_embeddings and self.pre_process,
                gather_output=not self.parallel_output, tau=dims.router_tau,
                routed=dims.routed, statistic=dims.router_statistic, direction=dims.router_direction,
                unit=dims.router_unit,
            )

    def forward(self, input_ids: Any, position_ids: Any, attention_mask: Any, decoder_input: Any = None,
                labels: Any = None, *args: Any, route_labels: Any = None, **kwargs: Any) -> Any:
        """GPTModel.forward; the labels also reach the output layer, whose router decides per
        character or word of the predicted tokens when its unit says so (route_units.py).
        `route_labels`: the tokens predicted, for the router only (the logits are returned)."""
        if self.post_process:
            self.output_layer.unit_labels = labels if route_labels is None else route_labels
        try:
            return super().forward(input_ids, position_ids, attention_mask, decoder_input, labels, *args, **kwargs)
        finally:
            if self.post_process:
                self.output_layer.unit_labels = None


def build_scale_gpt(
    base_config: Any,
    scale: ScaleConfig | ScaleDims,
    *,
    vocab_size: int,
    max_sequence_length: int,
    tied_embeddings: bool = False,
    backend: ScaleBackend = LOCAL,
    vp_stage: int | None = None,
    pp_rank: int | None = None,
    **gpt_kwargs: Any,
) -> ScaleGPTModel:
    """Build the SCALE model for this rank's TP partition and pipeline stage.

    `scale`: the settings, resolved here against `base_config`, or a resolved geometry (a
    checkpoint's, `ScaleDims.from_record`), checked against it. `gpt_kwargs` go to GPTModel
    (position_embedding_type, rotary_base, pre_process, ...)."""
    tp = base_config.tensor_model_parallel_size
    if isinstance(scale, ScaleDims):
        scale.check_base(base_config, tp)
        dims = scale
    else:
        dims = scale.resolve(base_config, tp)
    config = dims.widened(base_config)
    spec = get_scale_block_spec(dims, config, backend, vp_stage=vp_stage, pp_rank=pp_rank)
    return ScaleGPTModel(
        dims, config, spec, vocab_size=vocab_size, max_sequence_length=max_sequence_length,
        tied_embeddings=tied_embeddings, vp_stage=vp_stage, **gpt_kwargs,
    )


def output_layers(model: nn.Module) -> list[ScaleOutputLayer]:
    return [m for m in model.modules() if isinstance(m, ScaleOutputLayer)]


@contextmanager
def output_head(model: nn.Module, head: str) -> Iterator[None]:
    """Temporarily choose the logits a SCALE model returns: adapt | preserve | route."""
    layers = output_layers(model)
    before = [layer.head for layer in layers]
    for layer in layers:
        layer.set_head(head)
    try:
        yield
    finally:
        for layer, h in zip(layers, before, strict=True):
            layer.set_head(h)


@contextmanager
def router_settings(
    model: nn.Module, tau: float | None = None, statistic: str | None = None, direction: str | None = None,
    unit: str | None = None,
) -> Iterator[None]:
    """Temporarily route with another tau, statistic, direction and/or unit (None: keep the
    model's). The router has no parameters, so this is all an evaluation-time override needs (a
    unit other than token also needs the tokenizer's codes: set_unit_codes)."""
    check_router(0.0, statistic or "cosine", "tau", "router statistic", direction or "above", "router direction",
                 unit or "token", "router unit")
    layers = output_layers(model)
    before = [(layer.tau, layer.statistic, layer.direction, layer.unit) for layer in layers]
    for layer in layers:
        layer.tau = layer.tau if tau is None else float(tau)
        layer.statistic = layer.statistic if statistic is None else statistic
        layer.direction = layer.direction if direction is None else direction
        layer.unit = layer.unit if unit is None else unit
    try:
        yield
    finally:
        for layer, (t, s, d, u) in zip(layers, before, strict=True):
            layer.tau, layer.statistic, layer.direction, layer.unit = t, s, d, u


def set_router_default(model: nn.Module, tau: float, statistic: str, direction: str = "above",
                       unit: str | None = None) -> None:
    """Make (tau, statistic, direction, unit) the model's router default: what it routes with and
    what the checkpoints it saves record (scale.dims). unit None: keep the model's."""
    unit = model.scale_dims.router_unit if unit is None else unit
    check_router(tau, statistic, "tau", "router statistic", direction, "router direction", unit, "router unit")
    model.scale_dims = dataclasses.replace(model.scale_dims, router_tau=float(tau), router_statistic=statistic,
                                           router_direction=direction, router_unit=unit)
    for layer in output_layers(model):
        layer.tau, layer.statistic, layer.direction, layer.unit = float(tau), statistic, direction, unit


def set_unit_codes(model: nn.Module, codes: Any) -> None:
    """Give the router the tokenizer's per-token codes (route_units.piece_codes over the model's
    padded vocabulary), which a char or word unit needs; None takes them away."""
    for layer in output_layers(model):
        layer.unit_codes = None if codes is None else codes.to(layer.weight_up.device)

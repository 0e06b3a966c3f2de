"""One forward pass per batch, the two heads captured at the output layer, per-token records kept
(route_stats/token_records.py). Works at any TP (the records are the same on every TP rank); PP = 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from megatron_scale.model.layers.heads import output_layers
from megatron_scale.route_stats.mixing import mixing_records
from megatron_scale.route_stats.token_records import token_records


@contextmanager
def capturing(model: Any) -> Iterator[Any]:
    """The model's output layer with capture on (z_p, z_a kept after each forward)."""
    layers = output_layers(model)
    if len(layers) != 1:
        raise ValueError("route sweeps need a SCALE model whose last stage is on this rank (pipeline size 1)")
    layer = layers[0]
    layer.capture, layer.captured = True, None
    try:
        yield layer
    finally:
        layer.capture, layer.captured = False, None


def records_of_batch(model: Any, layer: Any, batch: dict[str, torch.Tensor], statistics: Sequence[str],
                     alphas: Sequence[float] = ()) -> dict[str, torch.Tensor]:
    """Records of one batch ({tokens, labels, position_ids, attention_mask, loss_mask?}), only
    the tokens whose loss_mask is set, flattened, on the CPU; with `alphas`, also each alpha's
    mixture z_p + alpha (z_a - z_p) (route_stats/mixing.py, the router's global-weight control)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        model(batch["tokens"].to(device), batch["position_ids"].to(device), batch["attention_mask"].to(device))
    if layer.captured is None:
        raise RuntimeError("the output layer captured nothing (is it a SCALE model in eval mode?)")
    z_p, z_a = layer.captured  # [s, b, V/tp], as GPTModel's own loss reads them
    layer.captured = None
    labels = batch["labels"].to(device)
    group = layer.tp_group if layer.tp_size > 1 else None
    rec = {k: v.transpose(0, 1) for k, v in token_records(z_p, z_a, labels.t().contiguous(), group, statistics).items()}
    if alphas:
        rec.update({k: v.transpose(0, 1) for k, v in mixing_records(z_p, z_a, labels.t().contiguous(), group, alphas).items()})
    mask = batch.get("loss_mask")
    keep = torch.ones_like(labels, dtype=torch.bool) if mask is None else mask.to(device).bool()
    return {k: v[keep].cpu() for k, v in rec.items()}


def collect(model: Any, batches: Iterable[dict[str, torch.Tensor]], statistics: Sequence[str],
            alphas: Sequence[float] = ()) -> dict[str, torch.Tensor]:
    """Records of every batch, concatenated (model in eval mode for the pass, restored after)."""
    was_training = model.training
    model.eval()
    parts: list[dict[str, torch.Tensor]] = []
    try:
        with capturing(model) as layer:
            for batch in batches:
                parts.append(records_of_batch(model, layer, batch, statistics, alphas))
    finally:
        model.train(was_training)
    if not parts:
        raise ValueError("no batches to evaluate")
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

"""The widened input embedding and the two-headed output layer.

    embedding:  [E | E_up] lookup        E [V, d] frozen, E_up [V, d'] trainable, zero at init
    output:     z_p = W_out h            W_out [V, d] frozen (the embedding E when the base ties them)
                z_a = z_p + W_out_up h_up   W_out_up [V, d'] trainable, zero at init
                (gated: z_a = z_p + g W_out_up h_up, g a per-token gate from z_p alone: gate.py)

`skip_base_grad` (the base stream's backward skipped, fused.py): z_p is computed from the base
features without autograd, so the frozen W_out's dgrad (2 V d per token) is never issued and the
output layer hands zeros as the gradient of h; the embedding's base half is a lookup in a frozen
table, which autograd never records anyway.

W_out_up is the only way a Preserve model changes its output, so it trains in every variant. The
output layer returns z_a (training), z_p or the routed logits (routing.py), chosen by `head`; its
`router` (scale_options.Router: tau, statistic, direction, unit) is a plain attribute (an evaluation
setting, router_settings below). A unit other than token (model/layers/route_units.py) needs the tokenizer's
per-token codes (`unit_codes`, set_unit_codes below) and the labels of the forward
(`unit_labels`, set by ScaleGPTModel.forward): the decision of a unit is its first label's.
Both are vocab-parallel: rank r holds rows [V/tp * r, V/tp * (r+1)) of every table.
The functions at the end choose, on a built model, which logits its output layers return and how
they route (output_head, router_settings, set_router_default, set_unit_codes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.scale_config import Gate, Router, RouterOverride, ScaleDims
from megatron_scale.model.layers.gate import gate as gate_of
from megatron_scale.model.layers.partition import column_input, dp_group, param_device
from megatron_scale.model.layers.planar import join_planes, split_planes
from megatron_scale.model.layers.route_units import unit_starts
from megatron_scale.model.layers.routing import route

HEADS = ("auto", "adapt", "preserve", "route")


def _table(rows: int, cols: int, config: Any, trainable: bool) -> nn.Parameter:
    p = nn.Parameter(torch.zeros(rows, cols, dtype=config.params_dtype, device=param_device(config)))
    p.requires_grad_(trainable)
    return p


class _VocabParallel(nn.Module):
    def __init__(self, vocab: int, config: Any, tp_group: Any) -> None:
        super().__init__()
        self.config = config
        self.tp_group = tp_group if tp_group is not None else mc.parallel_state.get_tensor_model_parallel_group()
        self.tp_size = mc.get_pg_size(self.tp_group)
        self.tp_rank = mc.get_pg_rank(self.tp_group)
        self.vocab_start_index, self.vocab_end_index = (
            mc.VocabUtility.vocab_range_from_global_vocab_size(vocab, self.tp_rank, self.tp_size)
        )
        self.vocab_local = self.vocab_end_index - self.vocab_start_index

    def _vocab_sharded(self, prefix: str, tensors: dict, sharded_offsets: tuple, metadata: dict | None) -> dict:
        return mc.make_sharded_tensors_for_checkpoint(
            tensors, prefix, {k: 0 for k in tensors}, sharded_offsets, tp_group=self.tp_group,
            dp_cp_group=dp_group(metadata),
        )

    def _mark(self, p: nn.Parameter) -> None:
        # the expansion tables are the model's trainable embedding and output parameters: the
        # ones megatron-core's --decoupled-lr (OptimizerConfig.decoupled_lr) gives their own LR
        p.is_embedding_or_output_parameter = True  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)
        if self.tp_size > 1:
            mc.tensor_parallel.set_tensor_model_parallel_attributes(p, is_parallel=True, dim=0, stride=1)


class ScaleVocabParallelEmbedding(_VocabParallel):
    """Replaces LanguageModelEmbedding.word_embeddings. Per rank: weight [V/tp, d] (frozen),
    weight_up [V/tp, d']; forward [b, s] ids -> [b, s, d + d'] (or [s/tp, b, ...] reduce-scattered
    when the embedding module asks for it, as megatron-core's own does)."""

    def __init__(
        self, vocab: int, base_dim: int, up_dim: int, *, config: Any, tp_group: Any = None,
        reduce_scatter_embeddings: bool = False, planar: bool = False,
    ) -> None:
        super().__init__(vocab, config, tp_group)
        self.reduce_scatter_embeddings = reduce_scatter_embeddings
        self.planar = planar
        self.weight = _table(self.vocab_local, base_dim, config, trainable=False)
        self.weight_up = _table(self.vocab_local, up_dim, config, trainable=True)
        self.weight.scale_frozen = True  # type: ignore[attr-defined]  # our parameter tag (Tensor declares none)
        self._mark(self.weight_up)

    def forward(self, input_: torch.Tensor) -> torch.Tensor:
        if self.tp_size > 1:
            mask = (input_ < self.vocab_start_index) | (input_ >= self.vocab_end_index)
            ids = (input_ - self.vocab_start_index).masked_fill(mask, 0)
        else:
            ids, mask = input_, None
        if self.planar:
            return self._planar(ids, mask)
        out = torch.cat((F.embedding(ids, self.weight), F.embedding(ids, self.weight_up)), dim=-1)
        if self.tp_size == 1:
            return out
        out = out.masked_fill(mask.unsqueeze(-1), 0.0)
        if self.reduce_scatter_embeddings:
            out = out.transpose(0, 1).contiguous()
            return mc.reduce_scatter_to_sequence_parallel_region(out, group=self.tp_group)
        return mc.reduce_from_tensor_model_parallel_region(out, group=self.tp_group)

    def _planar(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The stream planar (planar.py) in [s, b] token order, returned as its [b, s, ..] transpose:
        megatron-core's embedding transposes it back, a view, its .contiguous() no copy. Under
        sequence parallelism each plane is reduce-scattered, then the two joined ([s/tp, b, ..])."""
        sb = ids.t()
        x, x_up = F.embedding(sb, self.weight), F.embedding(sb, self.weight_up)
        if mask is not None:
            x, x_up = (t.masked_fill(mask.t().unsqueeze(-1), 0.0) for t in (x, x_up))
            if self.reduce_scatter_embeddings:
                x, x_up = (mc.reduce_scatter_to_sequence_parallel_region(t, group=self.tp_group) for t in (x, x_up))
                return join_planes(x, x_up)
        out = join_planes(x, x_up)
        if mask is not None:
            out = mc.reduce_from_tensor_model_parallel_region(out, group=self.tp_group)
        return out.transpose(0, 1)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        return self._vocab_sharded(prefix, {"weight": self.weight, "weight_up": self.weight_up}, sharded_offsets, metadata)


class ScaleOutputLayer(_VocabParallel):
    """Replaces GPTModel.output_layer. Per rank: weight [V/tp, d] (frozen; None when tied to the
    embedding, which GPTModel then passes in), weight_up [V/tp, d']; forward [s, b, d + d'] ->
    logits [s, b, V/tp] (or [s, b, V] when gathered)."""

    route_counts: torch.Tensor  # a buffer (register_buffer below): [preserved, routed] tokens

    def __init__(
        self, vocab: int, base_dim: int, up_dim: int, *, config: Any, tp_group: Any = None,
        tied: bool, gather_output: bool, router: Router = Router(), routed: bool = False, gate: Gate = Gate(),
        skip_base_grad: bool = False, planar: bool = False,
    ) -> None:
        super().__init__(vocab, config, tp_group)
        self.base_dim = base_dim
        self.planar = planar  # the stream it reads is planar (planar.py)
        self.skip_base_grad = skip_base_grad
        self.gather_output = gather_output
        self.sequence_parallel = config.sequence_parallel
        self.router = router
        self.gate = gate  # of W_out_up's term (gate.py); statistic none: the paper's z_a
        self.unit_codes: torch.Tensor | None = None  # [V] uint8, route_units.piece_codes
        self.unit_labels: torch.Tensor | None = None  # [b, s] this forward's labels
        self.routed = routed
        self.head = "auto"
        # capture (route sweeps): keep this forward's (z_p, z_a) vocab-parallel slices, detached
        self.capture = False
        self.captured: tuple[torch.Tensor, torch.Tensor] | None = None
        self.weight = None if tied else _table(self.vocab_local, base_dim, config, trainable=False)
        if self.weight is not None:
            self.weight.scale_frozen = True  # type: ignore[attr-defined]  # our parameter tag (Tensor declares none)
        self.weight_up = _table(self.vocab_local, up_dim, config, trainable=True)
        self._mark(self.weight_up)
        self.register_buffer("route_counts", torch.zeros(2, dtype=torch.float64, device=param_device(config)),
                             persistent=False)

    def set_head(self, head: str) -> None:
        """Which logits forward returns: adapt (z_a), preserve (z_p), route, or auto: z_a while
        training, and for a Route model the routed logits in eval mode."""
        if head not in HEADS:
            raise ValueError(f"unknown output head {head!r}; choose one of {HEADS}")
        self.head = head

    @property
    def preserve_fraction(self) -> float:
        """Share of routed tokens sent to the preservation head since the last reset."""
        kept, total = self.route_counts.tolist()
        return kept / total if total else float("nan")

    def reset_route_counts(self) -> None:
        self.route_counts.zero_()

    def forward(
        self, hidden: torch.Tensor, weight: torch.Tensor | None = None, runtime_gather_output: bool | None = None
    ) -> tuple[torch.Tensor, None]:
        base_w = self.weight if weight is None else weight
        if base_w is None:
            raise ValueError("tied ScaleOutputLayer needs the embedding weight passed to forward")
        h_base, h_up = self._features(hidden)
        head = self.head
        if head == "auto":
            head = "route" if self.routed and not self.training else "adapt"
        z_p = torch.matmul(h_base, base_w.t())
        if head == "preserve":
            logits = z_p
        else:
            z_up = torch.matmul(h_up, self.weight_up.t())
            if self.gate.enabled:
                z_up = z_up * gate_of(z_p, self.gate, self.tp_group if self.tp_size > 1 else None)
            z_a = z_p + z_up
            logits = z_a
            if self.capture:
                self.captured = (z_p.detach(), z_a.detach())
            if head == "route":
                r = self.router
                logits, keep = route(z_p, z_a, r.tau, self.tp_group if self.tp_size > 1 else None,
                                     r.statistic, r.direction, self._unit_starts())
                self.route_counts[0] += keep.sum()  # on the device: no host sync per forward
                self.route_counts[1] += keep.numel()
        gather = self.gather_output if runtime_gather_output is None else runtime_gather_output
        if gather and self.tp_size > 1:
            logits = mc.gather_from_tensor_model_parallel_region(logits, group=self.tp_group)
        return logits, None

    def _features(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, h_up) of every token this rank's vocabulary slice scores; h without autograd under
        the skip (the base stream's backward: no dgrad of W_out)."""
        d, tp, sp, group = self.base_dim, self.tp_size, self.sequence_parallel, self.tp_group
        if self.planar:
            x, x_up = split_planes(hidden, d)
            return column_input(x.detach() if self.skip_base_grad else x, tp, sp, group), column_input(x_up, tp, sp, group)
        h = column_input(hidden, tp, sp, group, d if self.skip_base_grad else None)
        return (h[..., :d].detach() if self.skip_base_grad else h[..., :d]), h[..., d:]

    def _unit_starts(self) -> torch.Tensor | None:
        """[s, b] where the label's unit starts (None: every token decides alone)."""
        unit = self.router.unit
        if unit == "token":
            return None
        if self.unit_codes is None:
            raise ValueError(f"router unit {unit!r}: the model has no token codes; give the byte-level "
                             "tokenizer (builder.set_unit_codes; --tokenizer-model in training)")
        if self.unit_labels is None:
            raise ValueError(f"router unit {unit!r} decides per unit of the predicted tokens: "
                             "the forward needs labels")
        if self.unit_codes.numel() != self.vocab_local * self.tp_size:
            raise ValueError(f"router unit {unit!r}: {self.unit_codes.numel()} token codes for a vocabulary "
                             f"of {self.vocab_local * self.tp_size}")
        return unit_starts(self.unit_codes, self.unit_labels, unit).t()

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        tensors = {"weight_up": self.weight_up}
        if self.weight is not None:
            tensors["weight"] = self.weight
        return self._vocab_sharded(prefix, tensors, sharded_offsets, metadata)


class ScaleModel(Protocol):
    """What the router settings read and write of a SCALE model (model/build.py's ScaleGPTModel,
    which the layers do not import): its geometry and its modules."""

    scale_dims: ScaleDims

    def modules(self) -> Iterator[nn.Module]: ...


def output_layers(model: nn.Module | ScaleModel) -> list[ScaleOutputLayer]:
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
def router_settings(model: nn.Module, router: Router | RouterOverride) -> Iterator[None]:
    """Temporarily route with another router: a whole Router, or a RouterOverride's settings in
    place of each layer's (None: keep the model's). The router has no parameters, so this is all
    an evaluation-time override needs (a unit other than token also needs the tokenizer's codes:
    set_unit_codes)."""
    layers = output_layers(model)
    before = [layer.router for layer in layers]
    for layer in layers:
        layer.router = router.over(layer.router).check("router ")
    try:
        yield
    finally:
        for layer, r in zip(layers, before, strict=True):
            layer.router = r


def set_router_default(model: ScaleModel, router: Router) -> None:
    """Make `router` the model's router default: what it routes with and what the checkpoints it
    saves record (scale.dims)."""
    router = router.check("router ")
    model.scale_dims = model.scale_dims.with_router(router)
    for layer in output_layers(model):
        layer.router = router


def set_unit_codes(model: nn.Module, codes: Any) -> None:
    """Give the router the tokenizer's per-token codes (route_units.piece_codes over the model's
    padded vocabulary), which a char or word unit needs; None takes them away."""
    for layer in output_layers(model):
        layer.unit_codes = None if codes is None else codes.to(layer.weight_up.device)

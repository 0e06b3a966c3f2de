"""SCALE configuration: how wide the expansion is, which variant, how the new rows start.

`ScaleConfig` is what a user writes (every size optional: a quarter of the base by default).
`ScaleDims` is the resolved, validated geometry of one model: base sizes beside expansion sizes.
`ScaleConfig.resolve(base, tp)` makes one, and it checks every setting before any process group or
model exists, with one message per bad setting that names it. A checkpoint records the geometry as
`ScaleDims.to_record()` and gives it back with `ScaleDims.from_record` (no ScaleConfig in between);
`ScaleDims.check_base` then checks it against the model it is built for. The checks themselves
and the notes on default sizes are scale_checks.py's (re-exported here).

Notation (scale-method.md): hidden d (+d'), query heads h (+h'), KV groups g (+g'), SwiGLU width
f (+f'), head size k (never changes), L layers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from megatron_scale.flags import flag
from megatron_scale.scale_options import Gate, Router, RouterOverride, ScaleTraining
from megatron_scale.scale_checks import (
    ADAPT_MODULES, BASE_BACKWARDS, GATE_STATISTICS, OUTPUT_ROWS, ROUTER_DIRECTIONS, ROUTER_STATISTICS, ROUTER_UNITS, ScaleConfigError,
    base_sizes, check_architecture,
    check_tp, fail, head_choices_text, heads_and_groups, nearest_multiples, resolve_base_backward,
    size_notes,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "ADAPT_MODULES", "BASE_BACKWARDS", "GATE_STATISTICS", "INITS", "Gate", "OUTPUT_ROWS", "ROUTER_DIRECTIONS",
    "ROUTER_STATISTICS", "ROUTER_UNITS", "VARIANTS", "Router", "RouterOverride", "ScaleConfig", "ScaleTraining",
    "ScaleConfigError", "ScaleDims", "int_list", "size_notes", "word_list",
]

Variant = Literal["preserve", "adapt", "route"]
Init = Literal["svd", "normal", "zero"]
VARIANTS: tuple[str, ...] = get_args(Variant)
INITS: tuple[str, ...] = get_args(Init)

_log = logging.getLogger(__name__)


def int_list(text: str) -> tuple[int, ...]:
    """'8 9 10' or '8,9,10' -> (8, 9, 10)."""
    return tuple(int(x) for x in text.replace(",", " ").split())


def word_list(text: str) -> tuple[str, ...]:
    """'qkv proj' or 'qkv,proj' -> ('qkv', 'proj')."""
    return tuple(text.replace(",", " ").split())


@dataclass(kw_only=True, frozen=True)
class ScaleConfig:
    """SCALE settings as a user gives them (the flags are the field names as --scale-*; the variant
    is the caller's --method)."""

    hidden_up: int | None = field(default=None, metadata=flag("--scale-hidden-up"))
    """d': extra hidden dims. None: hidden_size // 4."""
    heads_up: int | None = field(default=None, metadata=flag("--scale-heads-up"))
    """h': extra query heads. None: g' * (h/g) when groups_up is given, else num_attention_heads // 4
    where that is whole KV groups at the base GQA ratio divisible by TP, else the nearest such
    geometry (size_notes says what was picked)."""
    groups_up: int | None = field(default=None, metadata=flag("--scale-groups-up"))
    """g': extra KV groups. None: h' / (h/g), so the GQA ratio holds."""
    ffn_up: int | None = field(default=None, metadata=flag("--scale-ffn-up"))
    """f': extra SwiGLU units (gate and up each). None: ffn_hidden_size // 4, or the positive
    multiple of TP nearest to it."""
    variant: Variant = "preserve"
    """preserve | adapt | route."""
    init: Init = field(default="svd", metadata=flag("--scale-init", choices=INITS))
    """How [W21 W22] starts: svd (top singular directions of W, scaled) | normal | zero."""
    init_std: float = field(default=0.02, metadata=flag("--scale-init-std"))
    """Standard deviation of the normal init (and of W22 under svd)."""
    adapt_layers: tuple[int, ...] | None = field(default=None, metadata=flag("--scale-adapt-layers", parse=int_list))
    """0-based layers whose W12 collaborates (adapt). None: the upper half."""
    adapt_modules: tuple[str, ...] = field(default=("qkv", "proj"), metadata=flag("--scale-adapt-modules", parse=word_list))
    """Modules whose W12 collaborates (adapt): any of qkv, proj, fc1, fc2. Default: attention."""
    route_adapt: bool = field(default=False, metadata=flag("--scale-route-adapt"))
    """route only: build the routed model on Adapt (W12 where the adapt settings say)."""
    router_tau: float = field(default=0.5, metadata=flag("--scale-router-tau"))
    """route: emit the preservation head where the router statistic >= tau (a default: evaluation
    and export take an override)."""
    router_statistic: str = field(default="cosine", metadata=flag("--scale-router-statistic", choices=ROUTER_STATISTICS))
    """route: the per-token statistic the router compares with tau (route_stats/statistics.py):
    cosine (the paper's, cos(z_p, z_a)) | centered-cosine | max-prob | certainty."""
    router_direction: str = field(default="above", metadata=flag("--scale-router-direction", choices=ROUTER_DIRECTIONS))
    """route: which side of tau keeps the preservation head: above (statistic >= tau, the paper's)
    | below (statistic <= tau, for a statistic lower on old-domain tokens; calibration picks it)."""
    router_unit: str = field(default="token", metadata=flag("--scale-router-unit", choices=ROUTER_UNITS))
    """route: what one decision covers: token (the paper's) | char (all tokens of one UTF-8
    character) | word (of one whitespace-delimited word); a unit takes its first token's decision.
    char/word need the byte-level tokenizer at evaluation and export."""
    output_rows: str = field(default="all", metadata=flag("--scale-output-rows", choices=OUTPUT_ROWS))
    """Which rows of the output layer's W_out_up train: all (the paper's) | hangul (only the
    vocabulary rows whose bytes can spell Hangul, derived from --tokenizer-model's bytes; the other
    rows keep their values, zero from the upscaling, so those tokens' logits stay z_p's: issue 45's
    script-scoped output rows, model/layers/output_rows.py)."""
    gate_statistic: str = field(default="none", metadata=flag("--scale-gate-statistic", choices=GATE_STATISTICS))
    """Train through a gate: z_a = z_p + g W_out_up h_up, g = sigmoid((tau - s(z_p)) / T) per token
    from a statistic s of z_p alone (max-prob | certainty; none: g = 1, the paper's). Parameter-free
    and causal; evaluation and the export use the same gate (model/layers/gate.py; issue 45)."""
    gate_tau: float = field(default=0.5, metadata=flag("--scale-gate-tau"))
    """The gate's midpoint: g = 1/2 where s(z_p) = tau."""
    gate_temperature: float = field(default=0.05, metadata=flag("--scale-gate-temperature"))
    """The gate's width T (> 0): g runs from 0.12 to 0.88 over tau -/+ 2T."""
    gate_direction: str = field(default="above", metadata=flag("--scale-gate-direction", choices=ROUTER_DIRECTIONS))
    """above: the gate closes where s(z_p) is above tau (the base is sure: an old-domain token), as
    SCALE-Route keeps z_p there | below: where it is below."""
    base_backward: str = field(default="auto", metadata=flag("--scale-base-backward", choices=BASE_BACKWARDS))
    """The backward through the frozen base stream: auto (skipped wherever no trainable parameter is upstream of
    it: Preserve, Route, the gate, the rows; computed where W12 exists: Adapt, --scale-route-adapt) | skip (the
    same, asked for: refused where W12 exists) | full (always computed: comparisons, debugging). The skip is exact:
    every trainable gradient is the full backward's (model/layers/fused.py; docs/performance.md)."""
    seed: int = field(default=1234, metadata=flag("--scale-seed"))
    """Seed of the expansion init (deterministic for a seed)."""

    @property
    def router(self) -> Router:
        """The router the --scale-router-* settings describe."""
        return Router.of_record(self, "router_")

    @property
    def gate(self) -> Gate:
        """The gate the --scale-gate-* settings describe."""
        return Gate.of_record(self, "gate_")

    def resolve(self, base: object, tensor_parallel_size: int = 1) -> ScaleDims:
        """Validate against a base TransformerConfig-like object and return the full geometry."""
        return _resolve(self, base, tensor_parallel_size)

    @classmethod
    def from_dims(cls, dims: ScaleDims) -> ScaleConfig:
        """The settings that resolve to `dims` (a checkpoint's geometry) on its base: what a run
        from that checkpoint takes for the --scale-* flags it was not given."""
        adapt_layers = tuple(sorted(dims.adapt_layers))
        return cls(
            hidden_up=dims.hidden_up, heads_up=dims.heads_up, groups_up=dims.groups_up, ffn_up=dims.ffn_up,
            variant=dims.variant, init=dims.init, init_std=dims.init_std, adapt_layers=adapt_layers,
            adapt_modules=tuple(sorted(dims.adapt_modules or ("qkv", "proj"))),
            route_adapt=dims.variant == "route" and bool(adapt_layers), **dims.router.record("router_"),
            **dims.training.record(), seed=dims.seed,
        )


@dataclass(kw_only=True, frozen=True)
class ScaleDims:
    """Resolved geometry of a SCALE model. Base sizes unprimed, expansion sizes `*_up`."""

    num_layers: int
    hidden: int
    hidden_up: int
    heads: int
    heads_up: int
    groups: int
    groups_up: int
    head_dim: int
    ffn: int
    ffn_up: int
    variant: Variant
    init: Init
    init_std: float
    adapt_layers: frozenset[int] = field(default_factory=frozenset)
    adapt_modules: frozenset[str] = field(default_factory=frozenset)
    router: Router = Router()
    """The router's default: what a Route model routes with unless evaluation or the export
    overrides it (not geometry: the router has no parameters, so a checkpoint that differs only in
    it loads; see routing.py)."""
    training: ScaleTraining = ScaleTraining()
    """What a run trains of it: output rows, gate, base backward (not geometry: a run may change it)."""
    seed: int = 1234

    @property
    def gate(self) -> Gate:
        """The gate of W_out_up's term (a training setting)."""
        return self.training.gate

    @property
    def gated(self) -> bool:
        return self.gate.enabled

    @property
    def skip_base_backward(self) -> bool:
        """The modules compute no gradient for the base features (model/layers/: skip_base_grad)."""
        return self.training.base_backward == "skip"

    def with_base_backward(self, setting: str) -> ScaleDims:
        """This geometry with --scale-base-backward `setting` resolved on it (refused by name where
        it cannot hold)."""
        backward = resolve_base_backward(setting, bool(self.adapt_layers), self.variant)
        return dataclasses.replace(self, training=dataclasses.replace(self.training, base_backward=backward))

    def with_training(self, given: Mapping[str, Any]) -> ScaleDims:
        """This geometry trained with the flat training settings `given` in place of its own (each
        checked by its --scale-* flag; base_backward resolved on the geometry)."""
        settings = {**self.training.record(), **given}
        backward = settings.pop("base_backward")
        training = ScaleTraining.of_record({**settings, "base_backward": "full"}).check()
        return dataclasses.replace(self, training=training).with_base_backward(backward)

    @property
    def routed(self) -> bool:
        return self.variant == "route"

    def with_router(self, router: Router) -> ScaleDims:
        """This geometry with `router` as its router's default (checked: a ScaleConfigError names its --scale-router-* flag)."""
        return dataclasses.replace(self, router=router.check())

    def geometry(self) -> dict[str, Any]:
        """The geometry alone, as the record spells it: what two models must share for one to load
        the other's checkpoint (the router and the training settings are not part of it)."""
        return {k: v for k, v in self.to_record().items() if k not in _NOT_GEOMETRY}

    def to_record(self) -> dict[str, Any]:
        """The checkpoint's `scale.dims` record, flat: the geometry's fields (sets as sorted lists),
        the router's as router_*, the training settings' as ScaleTraining.record spells them."""
        rec: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Router):
                rec.update(value.record("router_"))
            elif isinstance(value, ScaleTraining):
                rec.update(value.record())
            else:
                rec[f.name] = sorted(value) if isinstance(value, frozenset) else value
        return rec

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> ScaleDims:
        """The geometry a `scale.dims` record holds (the inverse of to_record). A record written
        before router_statistic / router_direction / router_unit / output_rows / gate_* existed
        lacks them: cosine / above / token / all / no gate; one written before base_backward existed
        takes auto's answer (skip where no W12 exists; the skip is exact). Any other
        missing or unknown key is one ScaleConfigError naming `where` (the checkpoint and its record)."""
        given = {"router_statistic": "cosine", "router_direction": "above", "router_unit": "token", "output_rows": "all",
                 "gate_statistic": "none", "gate_tau": 0.5, "gate_temperature": 0.05, "gate_direction": "above",
                 "base_backward": "auto", **record}
        names = set(_RECORD_KEYS)
        unknown, missing = sorted(set(given) - names), sorted(names - set(given))
        if unknown or missing:
            problems = ([f"unknown key(s) {unknown}"] if unknown else []) + (
                [f"missing key(s) {missing}"] if missing else [])
            raise ScaleConfigError(f"{where}: not a SCALE geometry record ({'; '.join(problems)})")
        geometry = {k: given[k] for k in _RECORD_KEYS if k not in _NOT_GEOMETRY}
        geometry["adapt_layers"] = frozenset(geometry["adapt_layers"])
        geometry["adapt_modules"] = frozenset(geometry["adapt_modules"])
        try:
            training = ScaleTraining.of_record({**given, "base_backward": "full"})  # resolved on the geometry below
            dims = cls(**geometry, router=Router.of_record(given, "router_"), training=training)
            return dims.with_base_backward(given["base_backward"])
        except ScaleConfigError as e:
            raise ScaleConfigError(f"{where}: {e}") from e

    def check_base(self, base: object, tensor_parallel_size: int = 1) -> None:
        """Refuse a base TransformerConfig-like object this geometry was not resolved against, or a
        tensor-parallel size that does not split it evenly (the checks `ScaleConfig.resolve` makes,
        for a geometry read back from a checkpoint)."""
        check_architecture(base)
        for name, value in base_sizes(base).items():
            if getattr(self, name) != value:
                raise ScaleConfigError(
                    f"ScaleDims.{name}={getattr(self, name)} does not match the base model's {value}"
                )
        ups = {"hidden_up": self.hidden_up, "heads_up": self.heads_up, "groups_up": self.groups_up,
               "ffn_up": self.ffn_up}
        check_tp(tensor_parallel_size, ups, base_sizes(base))

    def adapts(self, layer: int, module: str) -> bool:
        """Whether W12 exists (trainable, zero-initialised) in `module` of 0-based `layer`."""
        return layer in self.adapt_layers and module in self.adapt_modules

    def qkv_rows(self, up: bool) -> int:
        """Output rows of linear_qkv: (h + 2g) k for the base, (h' + 2g') k for the new groups."""
        h, g = (self.heads_up, self.groups_up) if up else (self.heads, self.groups)
        return (h + 2 * g) * self.head_dim

    def widened[C: DataclassInstance](self, base: C) -> C:
        """The TransformerConfig of the widened model: every width is base + expansion.

        kv_channels is pinned to the base head size k: the head size never changes."""
        return dataclasses.replace(
            base,
            hidden_size=self.hidden + self.hidden_up,
            num_attention_heads=self.heads + self.heads_up,
            num_query_groups=self.groups + self.groups_up,
            ffn_hidden_size=self.ffn + self.ffn_up,
            kv_channels=self.head_dim,
        )


def _resolve(cfg: ScaleConfig, base: object, tp: int) -> ScaleDims:
    sizes = base_sizes(base)
    d, h, g, f, layers = sizes["hidden"], sizes["heads"], sizes["groups"], sizes["ffn"], sizes["num_layers"]
    if cfg.variant not in VARIANTS:
        raise fail("variant", f"unknown variant {cfg.variant!r}; choose one of {', '.join(VARIANTS)}")
    router = cfg.router.check("--scale-router-")
    training = ScaleTraining(output_rows=cfg.output_rows, gate=cfg.gate).check()
    if cfg.init not in INITS:
        raise fail("init", f"unknown init {cfg.init!r}; choose one of {', '.join(INITS)}")
    check_architecture(base)
    if tp < 1:
        raise ScaleConfigError(f"tensor-parallel size must be >= 1, got {tp}")
    for name in ("hidden_up", "heads_up", "groups_up", "ffn_up"):
        value = getattr(cfg, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise fail(name, f"must be a positive integer, got {value!r}")
    ratio = h // g
    d_up = max(1, d // 4) if cfg.hidden_up is None else cfg.hidden_up
    h_up, g_up = heads_and_groups(cfg, h, ratio, tp)
    f_up = cfg.ffn_up
    if f_up is None:  # f/4 where it is a positive multiple of TP (unchanged), else the nearest one
        f_up = f // 4 if f // 4 > 0 and (f // 4) % tp == 0 else nearest_multiples(f / 4, tp)[0]
    if h_up % g_up or h_up // g_up != ratio:
        raise fail(
            "groups_up",
            f"heads_up/groups_up = {h_up}/{g_up} must equal the base GQA ratio "
            f"heads/groups = {h}/{g} = {ratio}; nearest valid: {head_choices_text(h_up, ratio, tp)}",
        )
    for name, value in (("heads_up", h_up), ("groups_up", g_up), ("ffn_up", f_up)):
        if value % tp:
            nearest = (head_choices_text(h_up if name == "heads_up" else g_up * ratio, ratio, tp)
                       if name != "ffn_up" else " or ".join(f"--scale-ffn-up {v}" for v in nearest_multiples(value, tp)))
            raise fail(
                name,
                f"{value} is not divisible by the tensor-parallel size {tp} "
                "(--tensor-model-parallel-size); each rank holds an equal share of the new units; "
                f"nearest valid: {nearest}",
            )
    check_tp(tp, {"hidden_up": d_up, "heads_up": h_up, "groups_up": g_up, "ffn_up": f_up}, sizes)
    if not 0 <= cfg.init_std:
        raise fail("init_std", f"must be >= 0, got {cfg.init_std}")
    bad = [m for m in cfg.adapt_modules if m not in ADAPT_MODULES]
    if bad:
        raise fail("adapt_modules", f"unknown module(s) {bad}; choose from {', '.join(ADAPT_MODULES)}")
    adapt_layers = range(layers // 2, layers) if cfg.adapt_layers is None else cfg.adapt_layers
    out_of_range = [i for i in adapt_layers if not 0 <= i < layers]
    if out_of_range:
        raise fail("adapt_layers", f"layers {out_of_range} are outside 0..{layers - 1}")
    collaborate = cfg.variant == "adapt" or (cfg.variant == "route" and cfg.route_adapt)
    dims = ScaleDims(
        **sizes,
        hidden_up=d_up,
        heads_up=h_up,
        groups_up=g_up,
        ffn_up=f_up,
        variant=cfg.variant,
        init=cfg.init,
        init_std=cfg.init_std,
        adapt_layers=frozenset(adapt_layers) if collaborate else frozenset(),
        adapt_modules=frozenset(cfg.adapt_modules) if collaborate else frozenset(),
        router=router,
        training=training,
        seed=cfg.seed,
    ).with_base_backward(cfg.base_backward)
    for note in size_notes(cfg, dims, tp):
        _log.info("SCALE default size: %s", note)
    return dims


# The record's flat keys, in its order, and those that are not geometry (the router's and the
# training settings': derived from their values, so a new setting needs no list kept by hand).
_RECORD_KEYS: tuple[str, ...] = tuple(ScaleDims(
    num_layers=1, hidden=1, hidden_up=1, heads=1, heads_up=1, groups=1, groups_up=1, head_dim=1, ffn=1, ffn_up=1,
    variant="preserve", init="svd", init_std=0.0).to_record())
_NOT_GEOMETRY = frozenset(Router().record("router_")) | frozenset(ScaleTraining.keys())

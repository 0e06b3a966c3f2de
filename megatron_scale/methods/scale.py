"""SCALE-Preserve, -Adapt and -Route (scale-method.md): the base widened, its weights frozen; the
model is built at one resolved geometry (ScaleDims), from the --scale-* flags against the base or
as --load's SCALE checkpoint records it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, get_args

import torch

from megatron_scale.checkpoint.io import load_checkpoint
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords
from megatron_scale.flags import flag_names, given, optional_twin
from megatron_scale.methods.base import Given, Tokens, TrainingMethod, first_difference, refuse_adapters
from megatron_scale.model import flops
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Kernels, build_scale
from megatron_scale.model.layers.heads import output_layers, set_unit_codes
from megatron_scale.model.layers.output_rows import scope_output_rows, script_rows
from megatron_scale.model.layers.route_units import piece_codes
from megatron_scale.scale_config import (
    RouterOverride, ScaleConfig, ScaleConfigError, ScaleDims, ScaleTraining, Variant,
)
from megatron_scale.upscale import load_upscaled

ScaleSettings = optional_twin(ScaleConfig, "ScaleSettings", __name__)
"""The --scale-* flags as given (None: --load's record, else ScaleConfig's default)."""
SCALE_FLAGS = flag_names(ScaleConfig)
# a --method value (Scale.names) -> the variant its geometry resolves with
VARIANT_OF: dict[str, Variant] = {f"scale-{v}": v for v in get_args(Variant)}
# fields compared as sets (their order is not part of the geometry)
UNORDERED = ("adapt_layers", "adapt_modules")


@dataclass(kw_only=True)
class ScaleFlags:
    """The SCALE settings (--scale-*; taken from --load when it is a SCALE checkpoint)."""

    scale: Any = field(default_factory=ScaleSettings)
    """ScaleSettings: ScaleConfig's fields as the --scale-* flags gave them."""


@dataclass(kw_only=True, frozen=True)
class Scale(TrainingMethod):
    """A SCALE variant at the resolved geometry `dims` (its variant: dims.variant)."""

    names = ("scale-preserve", "scale-adapt", "scale-route")
    flags = ScaleFlags
    own_wgrad_fusion = True
    owns = ("dims",)

    dims: ScaleDims

    @property
    def name(self) -> str:
        return f"scale-{self.dims.variant}"

    @property
    def scale_dims(self) -> ScaleDims:
        return self.dims

    @property
    def routes(self) -> bool:
        return self.dims.routed

    @staticmethod
    def recorded_dims(records: CheckpointRecords | None) -> ScaleDims | None:
        """The SCALE geometry a checkpoint records (`scale.dims`; None: a plain GPT model, no
        record, or no records); a record that is no geometry is one CheckpointError naming it."""
        if records is None:
            return None
        recorded = (records.scale or {}).get("dims")
        if recorded is None:
            return None
        try:
            return ScaleDims.from_record(recorded, where=f"{records.directory}: scale.dims")
        except ScaleConfigError as e:
            raise CheckpointError(str(e)) from e

    @classmethod
    def of(cls, config: ScaleConfig, args: LlamaArgs, tp: int = 1) -> Scale:
        """The method `config` resolves to on base `args` at tensor-parallel size `tp`."""
        return cls(dims=config.resolve(args.transformer_config(tp), tp))

    @classmethod
    def refuse_records(cls, records: CheckpointRecords | None, name: str, where: str, resuming: bool) -> None:
        super().refuse_records(records, name, where, resuming)
        if resuming and records is not None and cls.recorded_dims(records) is None:
            raise ValueError(f"{where}: a run of a plain model; --method {name} cannot resume it")

    @classmethod
    def refuse_foreign(cls, value: Any, name: str, where: str) -> None:
        variant = value.get("variant") if isinstance(value, dict) else None
        raise ValueError(f"{where}: holds a SCALE-{variant} model; train it with --method scale-{variant}, "
                         f"not --method {name}")

    @classmethod
    def check_entry(cls, entry: str, mine: Any, theirs: Any, where: str | os.PathLike[str]) -> None:
        """The geometry's record `mine` against the checkpoint's: another kind of model (plain GPT
        or SCALE) or another geometry, naming the first field that differs. The router's settings
        are recorded as the checkpoint's default, and the training settings (which output rows
        train) as what it was trained with: neither is geometry, so a model with others loads it
        (checkpoints written before router_statistic, router_direction or router_unit existed lack
        them: cosine, above, token)."""
        if (mine is None) != (theirs is None):
            kind = {True: "a plain GPT model", False: "a SCALE model"}
            raise CheckpointError(f"{where} holds {kind[theirs is None]} but the model is {kind[mine is None]}")
        if mine is None:
            return
        try:
            recorded = ScaleDims.from_record(theirs, where=f"{where}: scale.{entry}").geometry()
            mine = ScaleDims.from_record(mine, where=f"the model's scale.{entry}").geometry()
        except ScaleConfigError as e:
            raise CheckpointError(str(e)) from e
        differ = first_difference(mine, recorded)
        if differ is not None:
            field_, was, value = differ
            raise CheckpointError(f"{where}: SCALE geometry differs at '{field_}': checkpoint {was!r}, model {value!r}")

    @classmethod
    def plan(cls, given_: Given) -> Scale:
        """The geometry the --scale-* flags resolve to on the base; from a SCALE checkpoint its
        recorded geometry itself, each --scale-* flag given compared with it (refused by name), but
        --scale-output-rows, --scale-gate-* and --scale-base-backward, training settings a run may change."""
        variant = VARIANT_OF[given_.name]
        settings, tp = given(given_.flags.scale), given_.tp
        base = given_.arch.transformer_config(tp)
        dims = cls.recorded_dims(given_.records)
        if dims is None:
            return cls(dims=ScaleConfig(variant=variant, **settings).resolve(base, tp))
        if dims.variant != variant:
            raise ValueError(f"{given_.where}: the checkpoint's SCALE model has variant={dims.variant!r} but --method "
                             f"gives {given_.name!r}")
        recorded = ScaleConfig.from_dims(dims)
        training = {k: settings.pop(k) for k in ScaleTraining.keys() if k in settings}  # a flag given overrides
        for name, mine in settings.items():
            theirs = getattr(recorded, name)
            same = sorted(mine) == sorted(theirs) if name in UNORDERED else mine == theirs
            if not same:
                flag_name = SCALE_FLAGS[name]
                raise ValueError(f"{given_.where}: the checkpoint's SCALE model has {name}={theirs!r} but {flag_name} "
                                 f"gives {mine!r}; leave {flag_name} out to take the checkpoint's")
        try:
            dims.check_base(base, tp)
        except ValueError as e:
            raise ValueError(f"{given_.where}: {e}") from e
        return cls(dims=dims.with_training(training))

    def build(self, cfg: Any, args: LlamaArgs, kernels: Kernels) -> Any:
        return build_scale(cfg, args, kernels, self.dims)

    def check_base_backward(self, asked: str | None) -> None:
        """Its geometry resolved --scale-base-backward already (ScaleDims.with_training)."""

    def tokenizer_reason(self) -> str | None:
        """Scoped output rows (--scale-output-rows SCRIPT) are read off the tokenizer's bytes."""
        rows = self.dims.training.output_rows
        return None if rows == "all" else f"--scale-output-rows {rows} (or the checkpoint's): the rows come from " \
                                          "the byte-level tokenizer's bytes"

    def attach(self, model: Any, tokenizer: Tokens, router: RouterOverride = RouterOverride()) -> list[str]:
        """A Route model gets the tokenizer's per-token codes (route_codes), and a model whose
        output rows are scoped (--scale-output-rows SCRIPT) trains only that script's rows of
        W_out_up, derived from the tokenizer's bytes (model/layers/output_rows.py)."""
        layers = output_layers(model)
        if not layers:  # a pipeline stage without the output layer
            return []
        vocab = layers[0].vocab_local * layers[0].tp_size
        codes = self.route_codes(tokenizer, vocab, router)
        if codes is not None:
            set_unit_codes(model, codes)
        scope = self.dims.training.output_rows
        if scope == "all":
            return []
        if tokenizer.path is None:
            raise ValueError(f"--scale-output-rows {scope}: the rows come from the byte-level tokenizer: "
                             f"give {tokenizer.flag}")
        try:
            rows = script_rows(tokenizer.token_bytes(), vocab, scope)
        except ValueError as e:
            raise ValueError(f"--scale-output-rows {scope}: {e}") from e
        if not rows.any():
            raise ValueError(f"--scale-output-rows {scope}: {tokenizer.flag} {tokenizer.path} has no token of that script")
        return [f"output rows: {scope_output_rows(layers, rows)} of {vocab} rows of W_out_up train ({scope})"]

    def route_codes(self, tokenizer: Tokens, vocab_size: int,
                    router: RouterOverride = RouterOverride()) -> torch.Tensor | None:
        """The per-token codes (model/layers/route_units.py piece_codes: [vocab_size] uint8) of the
        byte-level `tokenizer` that a Route model routing with `router`'s settings in place of its
        own needs to decide per character or word: training, evaluation and the Hugging Face export
        (config.json) give them. None where nothing routes, or where the unit is token and the
        tokenizer gives none; one ValueError naming what is missing where the unit needs them."""
        if not self.routes:
            return None
        unit = router.over(self.dims.router).unit
        if tokenizer.path is None:
            if unit == "token":
                return None
            source = "--route-unit" if router.unit else "--route-unit or the checkpoint's --scale-router-unit"
            raise ValueError(f"router unit {unit!r} ({source}): deciding per {unit} needs the byte-level "
                             f"tokenizer: give {tokenizer.flag}")
        try:
            return piece_codes(tokenizer.token_bytes(), vocab_size)
        except ValueError as e:
            if unit == "token":
                return None
            raise ValueError(f"{tokenizer.flag} {tokenizer.path}: router unit {unit!r}: {e}") from e

    def flops_per_token(self, config: Any, vocab: int, seq: int) -> int:
        """Its geometry's: the frozen blocks without weight gradient, W12 where Adapt has it."""
        d = self.dims
        shape = flops.Shape(hidden=d.hidden, heads=d.heads, groups=d.groups, head_dim=d.head_dim, ffn=d.ffn,
                            hidden_up=d.hidden_up, heads_up=d.heads_up, groups_up=d.groups_up, ffn_up=d.ffn_up)
        full = flops.head_flops("preserve", shape, vocab)
        for layer in range(config.num_layers):
            modules = tuple(m for m in ("qkv", "proj", "fc1", "fc2") if d.adapts(layer, m))
            full += flops.layer_flops("adapt" if modules else "preserve", shape, seq, modules)
        return full

    def record(self) -> dict[str, Any]:
        """Its geometry (ScaleDims.to_record, with the router's default settings)."""
        return {"dims": self.dims.to_record()}

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> Scale | None:
        dims = cls.recorded_dims(records)
        return None if dims is None else cls(dims=dims)

    def load_initial(self, model: Any, reader: MegatronReader, base_layers: int) -> str:
        """A SCALE checkpoint as it is; a base upscaled on load (upscale/: the offline upscaling's
        function too)."""
        if self.recorded_dims(reader.records) is not None:
            load_checkpoint(model, reader.dir, records=reader.records, method=self)
            return "scale"
        base = reader.base_state()
        refuse_adapters(base, reader.dir)
        try:
            load_upscaled(model, base)
        except (KeyError, ValueError) as e:
            raise ValueError(f"--load {reader.dir}: not a checkpoint of this base model: {e}") from e
        return "base+upscale"

"""SCALE-Preserve, -Adapt and -Route (scale-method.md): the base widened, its weights frozen; the
model is built at one resolved geometry (ScaleDims), from the --scale-* flags against the base or
as --load's SCALE checkpoint records it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megatron_scale.checkpoint.io import load_checkpoint
from megatron_scale.checkpoint.reader import read_base_state
from megatron_scale.checkpoint.records import CheckpointRecords
from megatron_scale.scale_config import ScaleConfig, ScaleDims
from megatron_scale.flags import flag_names, given, optional_twin
from megatron_scale.methods.base import Given, TrainingMethod
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Kernels, build_scale
from megatron_scale.model.layers.lora import is_lora_key
from megatron_scale.upscale import load_upscaled

ScaleSettings = optional_twin(ScaleConfig, "ScaleSettings", __name__)
"""The --scale-* flags as given (None: --load's record, else ScaleConfig's default)."""
SCALE_FLAGS = flag_names(ScaleConfig)
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

    dims: ScaleDims

    @property
    def name(self) -> str:
        return f"scale-{self.dims.variant}"

    @classmethod
    def of(cls, config: ScaleConfig, args: LlamaArgs, tp: int = 1) -> Scale:
        """The method `config` resolves to on base `args` at tensor-parallel size `tp`."""
        return cls(dims=config.resolve(args.transformer_config(tp), tp))

    @classmethod
    def refuse_records(cls, records: CheckpointRecords | None, name: str, where: str, resuming: bool) -> None:
        if records is not None and records.lora is not None:
            super().refuse_records(records, name, where, resuming)
        if resuming and records is not None and records.dims is None:
            raise ValueError(f"{where}: a run of a plain model; --method {name} cannot resume it")

    @classmethod
    def plan(cls, given_: Given) -> Scale:
        """The geometry the --scale-* flags resolve to on the base; from a SCALE checkpoint its
        recorded geometry itself, each --scale-* flag given compared with it (refused by name)."""
        variant = given_.name.removeprefix("scale-")
        settings, tp = given(given_.flags.scale), given_.tp
        base = given_.arch.transformer_config(tp)
        dims = given_.records.dims if given_.records else None
        if dims is None:
            return cls(dims=ScaleConfig(variant=variant, **settings).resolve(base, tp))
        if dims.variant != variant:
            raise ValueError(f"{given_.where}: the checkpoint's SCALE model has variant={dims.variant!r} but --method "
                             f"gives {given_.name!r}")
        recorded = ScaleConfig.from_dims(dims)
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
        return cls(dims=dims)

    def build(self, cfg: Any, args: LlamaArgs, kernels: Kernels) -> Any:
        return build_scale(cfg, args, kernels, self.dims)

    def record(self) -> dict[str, Any]:
        """Its geometry (ScaleDims.to_record, with the router's default settings)."""
        return {"dims": self.dims.to_record()}

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> Scale | None:
        return None if records.dims is None else cls(dims=records.dims)

    def load_initial(self, model: Any, directory: str | Path, records: CheckpointRecords | None,
                     base_layers: int) -> str:
        """A SCALE checkpoint as it is; a base upscaled on load."""
        if records is not None and records.is_scale:
            load_checkpoint(model, directory, records=records, method=self)
            return "scale"
        base = read_base_state(directory)
        if any(is_lora_key(k) for k in base):
            raise ValueError(f"--load {directory}: holds LoRA adapters; load it with --method lora "
                             "(merging them into the base weights is not supported)")
        try:
            load_upscaled(model, base)
        except (KeyError, ValueError) as e:
            raise ValueError(f"--load {directory}: not a checkpoint of this base model: {e}") from e
        return "base+upscale"

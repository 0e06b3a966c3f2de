"""The training-method protocol: one class per method owns its flags, how its model is built and
what of it trains, where its first weights come from, and what its checkpoints record.

    class Freeze(TrainingMethod):
        names = ("freeze",)                     # its --method value(s)
        flags = FreezeFlags                     # its typed flags (fields merged into MethodConfig)
        @classmethod
        def plan(cls, given: Given) -> Freeze   # from the flags given and --load's records
        def prepare(self, model, args)          # after the build: what it freezes
        def load_initial(...)                   # its first weights, from a base or its own checkpoint
        def record(self) -> dict                # what its checkpoints record (checkpoint/records.py `scale`)
        @classmethod
        def from_record(cls, records)           # itself, from a checkpoint's records (or None)

megatron_scale/methods/__init__.py lists the classes; `--method`'s choices and the method flags
come from that list. build_model (model/build.py) asks only `model_layers` and `build`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from megatron_scale.checkpoint.reader import read_base_state
from megatron_scale.checkpoint.records import CheckpointRecords
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Kernels, build_gpt
from megatron_scale.model.layers.lora import is_lora_key
from megatron_scale.model.weights.state import load_global_state_dict


@dataclass(frozen=True, kw_only=True)
class Given:
    """What a method is planned from: the flags given and what --load records."""

    name: str
    """The --method value."""
    flags: Any
    """The method flags (training/config.py MethodConfig: every method's flag fields)."""
    arch: LlamaArgs
    """The base architecture."""
    tp: int
    sequence_parallel: bool
    seed: int
    records: CheckpointRecords | None
    """--load's records (None: no --load, or no torch_dist checkpoint)."""
    resuming: bool
    """--load is a run checkpoint to resume."""
    where: str
    """`--load DIR`, for messages."""


class TrainingMethod:
    """A continual pre-training method (see the module docstring). The defaults describe a plain
    megatron-core GPTModel that trains whole and starts from a base checkpoint."""

    names: ClassVar[tuple[str, ...]] = ()
    """The --method values this class answers."""
    flags: ClassVar[type | None] = None
    """Its flags: a kw_only dataclass whose fields carry flag(...) metadata and docstrings."""
    own_wgrad_fusion: ClassVar[bool] = False
    """Its linears fuse weight-gradient accumulation through Transformer Engine alone."""

    @property
    def name(self) -> str:
        """The --method value."""
        return self.names[0]

    @classmethod
    def refuse_records(cls, records: CheckpointRecords | None, name: str, where: str, resuming: bool) -> None:
        """Refuse --load's records when they hold a model this method cannot train (before anything
        else is checked): by default a SCALE model or LoRA adapters."""
        if records is not None and records.dims is not None:
            variant = records.dims.variant
            raise ValueError(f"{where}: holds a SCALE-{variant} model; train it with --method scale-{variant}, "
                             f"not --method {name}")
        if records is not None and records.lora is not None:
            raise ValueError(f"{where}: holds LoRA adapters; load it with --method lora "
                             "(merging them into the base weights is not supported)")

    @classmethod
    def base_layers_of(cls, recorded: int, flags: Any) -> int:
        """--num-layers (the base's) of a run of this method whose record counts `recorded` layers."""
        return recorded

    @classmethod
    def grown_layers(cls, base_layers: int, flags: Any) -> int:
        """The layers a run of this method on a base of `base_layers` records (before it is planned)."""
        return base_layers

    @classmethod
    def plan(cls, given: Given) -> TrainingMethod:
        """The method the flags given and --load's records describe (checked, naming the flag)."""
        return cls()

    def model_layers(self, base_layers: int) -> int:
        """The model's layer count, for a base of `base_layers`."""
        return base_layers

    def build(self, cfg: Any, args: LlamaArgs, kernels: Kernels) -> Any:
        """This rank's chunk: megatron-core's GPTModel, then `prepare`."""
        model = build_gpt(cfg, args, kernels)
        self.prepare(model, args)
        return model

    def prepare(self, model: Any, args: LlamaArgs) -> None:
        """Choose what trains, once built (default: everything)."""

    def load_initial(self, model: Any, directory: str | Path, records: CheckpointRecords | None,
                     base_layers: int) -> str:
        """Fill `model` from --load when it is not a run to resume (`records`: --load's). Returns
        what was loaded. Default: a base checkpoint as it is."""
        base = read_base_state(directory)
        if any(is_lora_key(k) for k in base):
            raise ValueError(f"--load {directory}: holds LoRA adapters; load it with --method lora "
                             "(merging them into the base weights is not supported)")
        try:
            load_global_state_dict(model, self.initial_state(base, base_layers))
        except (KeyError, ValueError) as e:  # strict loading names the missing key or bad shape
            raise ValueError(f"--load {directory}: not a checkpoint of this base model: {e}") from e
        return self.loaded_as

    loaded_as: ClassVar[str] = "base"
    """What `load_initial` says it loaded from a base."""

    def initial_state(self, base: dict[str, torch.Tensor], base_layers: int) -> dict[str, torch.Tensor]:
        """The model's global state dict made from a base checkpoint's (default: the base's)."""
        return base

    def record(self) -> dict[str, Any]:
        """What its checkpoints record in the `scale` record (records.scale_record): `dims`, the
        SCALE geometry's record (None: a plain GPT model, as here), and any entry of its own
        (LoRA: `lora`; a new method may add one under a new key). A load compares every entry
        with the checkpoint's (checkpoint.check_method_record)."""
        return {"dims": None}

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> TrainingMethod | None:
        """This method as a checkpoint's records describe it (`records.dims`, `records.lora`, or
        an entry of its own in `records.scale`), or None when they are not this method's. A method
        recorded as a plain model (Freeze, LLaMA-Pro) answers None: `Full` stands for it
        (methods.recorded_method)."""
        return None

"""The training-method protocol: one class per method owns its flags, how its model is built and
what of it trains, where its first weights come from, and what its checkpoints record.

    class Freeze(TrainingMethod):
        names = ("freeze",)                     # its --method value(s)
        flags = FreezeFlags                     # its typed flags (fields merged into MethodConfig)
        @classmethod
        def plan(cls, given: Given) -> Freeze   # from the flags given and --load's records
        def prepare(self, model, args)          # after the build: what it freezes
        def attach(self, model, tokenizer)      # built and loaded: what it takes from the tokenizer
        def load_initial(...)                   # its first weights, from a base or its own checkpoint
        def record(self) -> dict                # what its checkpoints record (checkpoint/records.py `scale`)
        @classmethod
        def from_record(cls, records)           # itself, from a checkpoint's records (or None)
        def check_record(self, records, where)  # a load refuses a checkpoint whose record is not its own

A class that records an entry of its own in the `scale` record names it in `owns` and says what
it means: `check_entry` compares it at every load (whichever method the model was built for),
`refuse_foreign` refuses --load's records holding it for another method. Scale owns `dims` (the
geometry), Lora owns `lora`; an entry nobody owns is compared as it is.

megatron_scale/methods/__init__.py lists the classes; `--method`'s choices and the method flags
come from that list. build_model (model/build.py) asks only `model_layers` and `build`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.checkpoint.records import WRITER_ENTRIES, CheckpointError, CheckpointRecords
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model import flops
from megatron_scale.model.build import Kernels, build_gpt
from megatron_scale.model.layers.lora import is_lora_key
from megatron_scale.model.weights.state import load_global_state_dict
from megatron_scale.scale_config import RouterOverride


class Tokens(Protocol):
    """A tokenizer as a flag named it (data/tokenizer.py TokenFile): what `attach` reads a model's
    per-token tables from."""

    @property
    def path(self) -> str | os.PathLike[str] | None:
        """None: not given."""
        ...

    @property
    def flag(self) -> str: ...

    def token_bytes(self) -> list[bytes]:
        """The bytes of every token id; one ValueError where it is not a byte-level BPE."""
        ...


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
    transformer_impl: str = "local"
    """--transformer-impl: local | transformer_engine."""
    records: CheckpointRecords | None
    """--load's records (None: no --load, or no torch_dist checkpoint)."""
    resuming: bool
    """--load is a run checkpoint to resume."""
    where: str
    """`--load DIR`, for messages."""


def first_difference(mine: dict[str, Any], theirs: dict[str, Any],
                     skip: tuple[str, ...] = ()) -> tuple[str, Any, Any] | None:
    """(field, checkpoint's value, model's value) at the first field of `mine` that differs."""
    for field, value in mine.items():
        if field not in skip and theirs.get(field) != value:
            return field, theirs.get(field), value
    return None


def refuse_adapters(state: dict[str, torch.Tensor], directory: str | os.PathLike[str]) -> None:
    """A base checkpoint's tensors hold no LoRA adapters (a method other than LoRA loads it)."""
    if any(is_lora_key(k) for k in state):
        raise ValueError(f"--load {directory}: holds LoRA adapters; load it with --method lora "
                         "(merging them into the base weights is not supported)")


_OWNERS: dict[str, type[TrainingMethod]] = {}
"""`scale` record entry -> the method class that owns it (TrainingMethod.owns)."""


class TrainingMethod:
    """A continual pre-training method (see the module docstring). The defaults describe a plain
    megatron-core GPTModel that trains whole and starts from a base checkpoint."""

    owns: ClassVar[tuple[str, ...]] = ()
    """The `scale` record entries this class records and describes (check_entry, refuse_foreign)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for entry in cls.__dict__.get("owns", ()):
            _OWNERS[entry] = cls

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
        else is checked): by default any entry another class owns (a SCALE model, LoRA adapters),
        refused by its owner."""
        for entry, value in ((records.scale or {}) if records is not None else {}).items():
            owner = _OWNERS.get(entry)
            if value is not None and owner is not None and entry not in cls.owns:
                owner.refuse_foreign(value, name, where)

    @classmethod
    def refuse_foreign(cls, value: Any, name: str, where: str) -> None:
        """Refuse --load's records (`where`) for `--method name`: they hold this class's entry
        `value` (an entry of `owns`), which that method cannot train."""
        raise ValueError(f"{where}: holds a --method {cls.names[0]} model; --method {name} cannot train it")

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

    def attach(self, model: Any, tokenizer: Tokens, router: RouterOverride = RouterOverride()) -> list[str]:
        """Give the built (and loaded) `model` what it takes from `tokenizer` (its path None: none given),
        where it is to route with `router`'s settings in place of its own. Returns lines saying
        what it did, for the caller to print; one ValueError naming the tokenizer's flag where it
        cannot give what the model needs. Default: nothing (a plain model needs none)."""
        return []

    def flops_per_token(self, config: Any, vocab: int, seq: int) -> int:
        """GEMM FLOPs per token of one training step (forward and backward; model/flops.py) of its
        model at TransformerConfig `config`: every GEMM trained, Megatron-LM's convention (frozen
        layers still counted)."""
        shape = flops.Shape(hidden=config.hidden_size, heads=config.num_attention_heads,
                            groups=config.num_query_groups, head_dim=config.kv_channels, ffn=config.ffn_hidden_size)
        return flops.model_flops("full_ft", shape, seq, config.num_layers, vocab)

    def tokenizer_reason(self) -> str | None:
        """Why this run needs the tokenizer's bytes before its first step (plan.py then refuses a
        run without --tokenizer-model, before the build), or None: most methods need none."""
        return None

    def check_base_backward(self, asked: str | None) -> None:
        """--scale-base-backward `asked`: skip is for a SCALE model whose base stream has no
        trainable ancestor (Scale refuses it where W12 exists). Every other method trains
        parameters upstream of activations (`trains`: LoRA its adapters on the base's linears,
        full and freeze the base's own weights, llama-pro its inserted blocks), so it keeps the
        full backward: the skip is refused by name. `full` and `auto` are what it does anyway."""
        if asked == "skip":
            raise ValueError(f"--scale-base-backward skip: --method {self.name} trains {self.trains}, upstream of "
                             "the activations it feeds, so its gradients need the full backward; the skip is for "
                             "SCALE models without W12 (--method scale-preserve, scale-route)")

    def load_initial(self, model: Any, reader: MegatronReader, base_layers: int) -> str:
        """Fill `model` (built for this method on a base of `base_layers` layers) from a checkpoint
        that is not a run to resume (`reader`: it, its records read): methods/load.py load_model
        with a method given. Returns what was loaded. Default: a base checkpoint as it is."""
        base = reader.base_state()
        refuse_adapters(base, reader.dir)
        try:
            load_global_state_dict(model, self.initial_state(base, base_layers))
        except (KeyError, ValueError) as e:  # strict loading names the missing key or bad shape
            raise ValueError(f"--load {reader.dir}: not a checkpoint of this base model: {e}") from e
        return self.loaded_as

    loaded_as: ClassVar[str] = "base"
    """What `load_initial` says it loaded from a base."""

    def initial_state(self, base: dict[str, torch.Tensor], base_layers: int) -> dict[str, torch.Tensor]:
        """The model's global state dict made from a base checkpoint's (default: the base's)."""
        return base

    def record(self) -> dict[str, Any]:
        """What its checkpoints record in the `scale` record (records.scale_record): first `dims`,
        the model's geometry (None: a plain GPT model, as here; Scale: the SCALE geometry), then
        any entry of its own (LoRA: `lora`; a new method may add one under a new key). A load
        checks them against the checkpoint's (check_record)."""
        return {"dims": None}

    def check_record(self, records: CheckpointRecords, where: str | os.PathLike[str]) -> None:
        """Refuse (CheckpointError naming `where` and the entry) a checkpoint whose `scale` record
        is not this method's: each entry it records, and each the checkpoint holds beside the
        writer's, is compared by the class that owns it (check_entry: another kind of model,
        another SCALE geometry, another LoRA rank), or else as it is."""
        mine, theirs = self.record(), records.scale or {}
        for entry in [*mine, *(k for k in theirs if k not in mine and k not in WRITER_ENTRIES)]:
            owner = _OWNERS.get(entry)
            if owner is not None:
                owner.check_entry(entry, mine.get(entry), theirs.get(entry), where)
            elif theirs.get(entry) != mine.get(entry):
                raise CheckpointError(f"{where}: scale.{entry} is {theirs.get(entry)!r} but the model's method "
                                      f"({self.name}) records {mine.get(entry)!r}")

    @classmethod
    def check_entry(cls, entry: str, mine: Any, theirs: Any, where: str | os.PathLike[str]) -> None:
        """Refuse a checkpoint whose `entry` (one of this class's `owns`; `theirs`, as saved) is not
        the model's (`mine`, what its method records; None: it records none)."""
        if mine != theirs:
            raise CheckpointError(f"{where}: scale.{entry} is {theirs!r} but the model records {mine!r}")

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> TrainingMethod | None:
        """This method as a checkpoint's records describe it (its own entries in `records.scale`),
        or None when they are not this method's. A method recorded as a plain model (Freeze,
        LLaMA-Pro) answers None: `Full` stands for it (methods.recorded_method)."""
        return None

    @property
    def routes(self) -> bool:
        """Its model routes between two heads (SCALE-Route): evaluation's --route-* flags apply."""
        return False

    @property
    def scale_dims(self) -> Any:
        """The SCALE geometry (scale_config.ScaleDims) of the model it builds; None: a plain GPT
        model (any method but Scale)."""
        return None

    trains: ClassVar[str] = "the base model's own weights"
    """What of the model it trains, upstream of the base stream unless the method is SCALE's
    (check_base_backward: the skip of the base stream's backward is refused)."""
    exported_as: ClassVar[str] = "llama"
    """What a plain Hugging Face export of its checkpoints is (convert/to_hf.py's summary)."""
    merged_on_export: ClassVar[bool] = False
    """A plain export merges weights of its own into the base's (exported_tensor), so the exported
    weights are rounded once more than the checkpoint's (convert/verify.py's tolerance)."""

    def exported_tensor(self, reader: MegatronReader, key: str) -> torch.Tensor:
        """Tensor `key` of the plain GPT model its checkpoint (`reader`: checkpoint/reader.py)
        exports as: the saved one (LoRA: its adapters merged in)."""
        return reader.get(key)

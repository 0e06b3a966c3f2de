"""LoRA (Hu et al., 2022) on the four linears of every layer; only the adapters train
(model/layers/lora.py holds the layers)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords
from megatron_scale.flags import flag
from megatron_scale.methods.base import Given, TrainingMethod, first_difference
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Kernels, build_gpt
from megatron_scale.model.layers.lora import LoraSettings, init_lora_model, is_lora_key, lora_layer_spec
from megatron_scale.model.weights.state import load_global_state_dict

DEFAULTS = LoraSettings()


@dataclass(kw_only=True)
class LoraFlags:
    """--method lora's settings (None: --load's record, else the default)."""

    lora_rank: int | None = field(default=None, metadata=flag("--lora-rank"))
    """lora: rank r of every adapter (default 8)."""
    lora_alpha: float | None = field(default=None, metadata=flag("--lora-alpha"))
    """lora: the update is scaled by alpha / r (default 16)."""
    lora_dropout: float = field(default=0.0, metadata=flag("--lora-dropout"))
    """lora: dropout on the adapters' input."""


@dataclass(kw_only=True, frozen=True)
class Lora(TrainingMethod):
    """LoRA adapters on the base's linears; the base frozen."""

    names = ("lora",)
    flags = LoraFlags
    owns = ("lora",)
    trains = "LoRA adapters on the base's own linears"
    exported_as = "llama (LoRA merged)"
    merged_on_export = True

    settings: LoraSettings = DEFAULTS

    @staticmethod
    def recorded_settings(records: CheckpointRecords | None) -> dict[str, Any] | None:
        """The rank and alpha a LoRA checkpoint records (`scale.lora`), else None."""
        return (records.scale or {}).get("lora") if records is not None else None

    @classmethod
    def refuse_records(cls, records: CheckpointRecords | None, name: str, where: str, resuming: bool) -> None:
        super().refuse_records(records, name, where, resuming)
        if resuming and cls.recorded_settings(records) is None:
            raise ValueError(f"{where}: a run of a model without LoRA adapters; --method lora cannot resume it")

    @classmethod
    def refuse_foreign(cls, value: Any, name: str, where: str) -> None:
        raise ValueError(f"{where}: holds LoRA adapters; load it with --method lora "
                         "(merging them into the base weights is not supported)")

    @classmethod
    def check_entry(cls, entry: str, mine: Any, theirs: Any, where: str | os.PathLike[str]) -> None:
        """The adapters' rank and alpha `mine` against the checkpoint's (or the presence of
        adapters), naming the first that differs and its flag."""
        if (mine is None) != (theirs is None):
            kind = {True: "no LoRA adapters", False: "LoRA adapters"}
            raise CheckpointError(f"{where} holds {kind[theirs is None]} but the model has {kind[mine is None]}")
        differ = first_difference(mine or {}, theirs or {})
        if differ is not None:
            field_, was, value = differ
            raise CheckpointError(
                f"{where}: LoRA settings differ at '{field_}': checkpoint {was!r}, model {value!r} (--lora-{field_})")

    @classmethod
    def plan(cls, given: Given) -> Lora:
        """--lora-rank / --lora-alpha from the flags, else a LoRA checkpoint's record (a given one
        that differs is refused), else the defaults."""
        f, recorded = given.flags, cls.recorded_settings(given.records)
        chosen = {"rank": f.lora_rank, "alpha": f.lora_alpha}
        for key, mine in chosen.items():
            flag_name = f"--lora-{key}"
            if recorded is None:
                chosen[key] = getattr(DEFAULTS, key) if mine is None else mine
            elif mine is None:
                chosen[key] = recorded[key]
            elif float(mine) != float(recorded[key]):
                raise ValueError(f"{given.where}: the checkpoint's LoRA adapters have {key} {recorded[key]!r} but "
                                 f"{flag_name} gives {mine!r}; leave {flag_name} out to take the checkpoint's")
        if given.sequence_parallel:
            raise ValueError("--sequence-parallel is not supported with --method lora")
        settings = LoraSettings(rank=int(chosen["rank"]), alpha=float(chosen["alpha"]), dropout=f.lora_dropout,
                                seed=given.seed)
        if given.transformer_impl == "transformer_engine":
            raise ValueError("--method lora: not with --transformer-impl transformer_engine "
                             "(the adapters wrap megatron-core's local linears)")
        return cls(settings=settings)

    def record(self) -> dict[str, Any]:
        """No geometry; its adapters' rank and alpha (what a load must agree on)."""
        return {"dims": None, "lora": self.settings.record()}

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> Lora | None:
        lora = cls.recorded_settings(records)
        if (records.scale or {}).get("dims") is not None or lora is None:  # adapters on a plain model only
            return None
        return cls(settings=LoraSettings(rank=int(lora["rank"]), alpha=float(lora["alpha"])))

    def exported_tensor(self, reader: MegatronReader, key: str) -> torch.Tensor:
        """The adapters beside a weight merged into it: W + (alpha / r) B A, per layer
        ([L, out, r] @ [L, r, in]), computed in fp32."""
        w = reader.get(key)
        stem = key.removesuffix("weight")
        if not key.endswith("weight") or stem + "lora_a" not in reader.meta:
            return w
        a, b = reader.get(stem + "lora_a").float(), reader.get(stem + "lora_b").float()
        return (w.float() + self.settings.scaling * torch.matmul(b, a)).to(w.dtype)

    def build(self, cfg: Any, args: LlamaArgs, kernels: Kernels) -> Any:
        spec = lora_layer_spec(mc.get_gpt_layer_local_spec(normalization="RMSNorm"), self.settings, gated=True)
        model = build_gpt(cfg, args, kernels, spec)
        init_lora_model(model, self.settings)
        return model

    def load_initial(self, model: Any, reader: MegatronReader, base_layers: int) -> str:
        """A base checkpoint (the adapters keep their fresh A and zero B), or a LoRA one whose
        every adapter loads too, if its rank and alpha are this run's."""
        state = reader.base_state()
        try:
            if not any(is_lora_key(k) for k in state):
                missing = load_global_state_dict(model, state, strict=False)
                lacking = [k for k in missing if not is_lora_key(k)]
                if lacking:
                    raise KeyError(f"state dict lacks {len(lacking)} key(s), first: {lacking[:5]}")
                return "base+lora"
            if reader.records.scale is not None:  # a megatron-scale checkpoint: its rank and alpha
                self.check_record(reader.records, reader.dir)
            load_global_state_dict(model, state)
            return "lora"
        except (KeyError, ValueError) as e:  # strict loading names the missing key or bad shape
            raise ValueError(f"--load {reader.dir}: not a checkpoint of this base model: {e}") from e

"""Full fine-tuning: megatron-core's GPTModel, every weight trains (the upper bound on learning
and on forgetting)."""

from __future__ import annotations

from dataclasses import dataclass

from megatron_scale.methods.base import TrainingMethod
from megatron_scale.checkpoint.records import CheckpointRecords


PLAIN_RECORD = {"frozen_digest", "dims", "mcore_version"}
"""The `scale` record's keys for a plain model."""


@dataclass(kw_only=True, frozen=True)
class Full(TrainingMethod):
    """Full fine-tuning: every weight trains."""

    names = ("full",)

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> Full | None:
        """A plain GPT model's record (no geometry, no adapters, no entry of another method's):
        built as Full."""
        plain = records.dims is None and records.lora is None
        return cls() if plain and not set(records.scale or {}) - PLAIN_RECORD else None

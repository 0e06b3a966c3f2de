"""Full fine-tuning: megatron-core's GPTModel, every weight trains (the upper bound on learning
and on forgetting)."""

from __future__ import annotations

from dataclasses import dataclass

from megatron_scale.methods.base import TrainingMethod
from megatron_scale.checkpoint.records import WRITER_ENTRIES, CheckpointRecords

PLAIN_RECORD = {*WRITER_ENTRIES, "dims"}
"""The `scale` record's keys for a plain model (no geometry: `dims` None)."""


@dataclass(kw_only=True, frozen=True)
class Full(TrainingMethod):
    """Full fine-tuning: every weight trains."""

    names = ("full",)

    @classmethod
    def from_record(cls, records: CheckpointRecords) -> Full | None:
        """A plain GPT model's record (no geometry, no adapters, no entry of another method's):
        built as Full."""
        scale = records.scale or {}
        return cls() if scale.get("dims") is None and not set(scale) - PLAIN_RECORD else None

"""Full fine-tuning: megatron-core's GPTModel, every weight trains (the upper bound on learning
and on forgetting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megatron_scale.config import ScaleDims
from megatron_scale.methods.base import TrainingMethod


@dataclass(kw_only=True, frozen=True)
class Full(TrainingMethod):
    """Full fine-tuning: every weight trains."""

    names = ("full",)

    @classmethod
    def from_record(cls, dims: ScaleDims | None, lora: dict[str, Any] | None) -> Full | None:
        """A plain GPT model's record (no geometry, no adapters): built as Full."""
        return cls() if dims is None and lora is None else None

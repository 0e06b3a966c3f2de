"""Full fine-tuning: megatron-core's GPTModel, every weight trains (the upper bound on learning
and on forgetting)."""

from __future__ import annotations

from dataclasses import dataclass

from megatron_scale.methods.base import TrainingMethod


@dataclass(kw_only=True, frozen=True)
class Full(TrainingMethod):
    """Full fine-tuning: every weight trains."""

    names = ("full",)

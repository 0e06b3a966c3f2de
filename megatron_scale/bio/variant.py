"""The name a biography run is filed and drawn under beside its method's: a SCALE method trained
with an option that is not the paper's (issue 45's gate) gets a tag, so that its stages and curves
can share a folder and a table with the paper's method."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from megatron_scale import method_catalog as catalog
from megatron_scale.scale_config import Gate, ScaleConfig

GATE = ("gate_statistic", "gate_tau", "gate_temperature", "gate_direction")


def gate_of(settings: Mapping[str, Any]) -> Gate:
    """The gate the flat keys GATE of `settings` give, ScaleConfig's default (the training entry's)
    where a key is None or absent."""
    default = ScaleConfig()
    return Gate.of_record({k: getattr(default, k) if settings.get(k) is None else settings[k] for k in GATE}, "gate_")


def variant_tag(settings: Mapping[str, Any], method: str) -> str:
    """What a run of `method` with `settings` (a Settings' fields, or a stage file's key) is drawn
    and filed under beside the method's name: "" for the paper's method; for a SCALE method trained
    through a gate "+gate-STAT-TAU-T-DIRECTION" (a stage's file name, its curve's name), so gated and
    ungated runs of one method can share a folder and a table."""
    g = gate_of(settings)
    if not g.enabled or not catalog.method(method).upscaled:
        return ""
    return f"+gate-{g.statistic}-{g.tau:g}-{g.temperature:g}-{g.direction}"

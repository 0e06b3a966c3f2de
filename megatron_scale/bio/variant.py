"""The name a biography run is filed and drawn under beside its method's: a SCALE method trained
with an option that is not the paper's (issue 45's gate) gets a tag, so that its stages and curves
can share a folder and a table with the paper's method."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from megatron_scale import method_catalog as catalog


def variant_tag(settings: Mapping[str, Any], method: str) -> str:
    """What a run of `method` with `settings` (a Settings' fields, or a stage file's key) is drawn
    and filed under beside the method's name: "" for the paper's method; for a SCALE method trained
    through a gate "+gate-STAT-TAU-T-DIRECTION" (a stage's file name, its curve's name), so gated and
    ungated runs of one method can share a folder and a table."""
    stat = settings.get("gate_statistic")
    if not stat or stat == "none" or not catalog.method(method).upscaled:
        return ""
    tau = 0.5 if settings.get("gate_tau") is None else settings["gate_tau"]
    temp = 0.05 if settings.get("gate_temperature") is None else settings["gate_temperature"]
    return f"+gate-{stat}-{tau:g}-{temp:g}-{settings.get('gate_direction') or 'above'}"

"""Every router statistic on the biography benchmark, from the last evaluation's per-probe
records (bio/evaluate.answer_records): task 0 is the old domain, task 1 the new one.

Per statistic: task-0 and task-1 first-token accuracy at every tau of a grid (z_p alone and z_a
alone at the two ends), the ROC of the router as a task-0-vs-task-1 classifier and its AUC, and
operating points: the best (highest task-1 accuracy with task 0 >= GOAL_TASK0; the highest mean
where none keeps task 0 there) and the calibrated one (keep >= 95% of task-0 answers on z_p,
target >= 50% of task-1 answers on z_a), both chosen on the evaluated probes themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from megatron_scale.route_stats.statistics import STATISTICS
from megatron_scale.route_eval import analysis

GOAL_TASK0, GOAL_TASK1 = 0.90, 0.50
KEEP_OLD, MIN_NEW_ADAPT = 0.95, 0.50


def _tensors(records: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in records.items()}


def best_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [p for p in points if p["task0"] >= GOAL_TASK0]
    if ok:
        return {**max(ok, key=lambda p: (p["task1"], p["task0"])), "rule": f"max task 1 with task 0 >= {GOAL_TASK0}"}
    return {**max(points, key=lambda p: p["task0"] + p["task1"]), "rule": "max mean (no tau keeps task 0 >= "
            f"{GOAL_TASK0})"}


def analyse(final_records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    sets = {name: _tensors(final_records[name]) for name in ("task0", "task1")}
    stats = [s for s in STATISTICS if f"stat/{s}" in sets["task0"]]
    out = analysis.analyse(("task0", sets["task0"]), ("task1", sets["task1"]), stats, "accuracy",
                           keep_old=KEEP_OLD, min_new_adapt=MIN_NEW_ADAPT)
    for entry in out["statistics"].values():
        best = best_point(entry["points"])
        entry["best"] = best
        entry["goal_met"] = best["task0"] >= GOAL_TASK0 and best["task1"] >= GOAL_TASK1
    return out


def summary_lines(analysis: Mapping[str, Any]) -> list[str]:
    lines = []
    for stat, a in analysis["statistics"].items():
        b, c = a["best"], a["calibration"]
        d = a.get("direction", "above")
        lines.append(f"router {stat}: z_p where {stat} {'>=' if d == 'above' else '<='} tau, AUC "
                     f"{a.get('auc_by_direction', {}).get(d, a['auc']):.3f}; best tau {b['tau']:.4g}: task0 {b['task0']:.3f} task1 "
                     f"{b['task1']:.3f} ({b['rule']}); calibrated tau {c['tau']:.4g}: task0 {c['task0']:.3f} "
                     f"task1 {c['task1']:.3f}; {c['message']}")
    return lines

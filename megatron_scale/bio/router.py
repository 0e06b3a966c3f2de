"""Every router statistic on the biography benchmark, from the last evaluation's per-probe
records (bio/evaluate.answer_records): task 0 is the old domain, task 1 the new one.

Per statistic: task-0 and task-1 first-token accuracy at every tau of a grid (z_p alone and z_a
alone at the two ends), the ROC of the router as a task-0-vs-task-1 classifier and its AUC, and
operating points: the best (highest task-1 accuracy with task 0 >= GOAL_TASK0; the highest mean
where none keeps task 0 there) and the calibrated one (keep >= 95% of task-0 answers on z_p,
target >= 50% of task-1 answers on z_a), both chosen on the evaluated probes themselves.

Beside them (issue 44): the paper's own router, cosine with z_p kept where cos >= tau, swept
over tau in that direction whatever the calibration prefers ("paper"); the controls that need no
router ("controls": random per-probe mixing of z_p and z_a at every rate, and the global weight
z_p + alpha (z_a - z_p) at every alpha the records hold); and the deployable point of each
statistic ("deployable"): tau and direction calibrated on the probes of the other half of the
people (even / odd index within each task), applied to each half, so no probe is routed by a
tau chosen with it. The unit is one decision per probe, at the answer's first token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from megatron_scale.bio.people import ATTRIBUTES
from megatron_scale.route_eval import analysis, controls
from megatron_scale.route_eval.curves import stat_key, sweep
from megatron_scale.route_stats.statistics import STATISTICS

GOAL_TASK0, GOAL_TASK1 = 0.90, 0.50
KEEP_OLD, MIN_NEW_ADAPT = 0.95, 0.50
UNIT = "one decision per probe, at the answer's first token"
PAPER_TAU = 0.5  # the training entry's default tau (the paper's router as a trained Route model uses it)


def _tensors(records: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in records.items()}


def best_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [p for p in points if p["task0"] >= GOAL_TASK0]
    if ok:
        return {**max(ok, key=lambda p: (p["task1"], p["task0"])), "rule": f"max task 1 with task 0 >= {GOAL_TASK0}"}
    return {**max(points, key=lambda p: p["task0"] + p["task1"]), "rule": "max mean (no tau keeps task 0 >= "
            f"{GOAL_TASK0})"}


def person_folds(n: int, per_person: int = len(ATTRIBUTES)) -> torch.Tensor:
    """Fold 0 / 1 of each of n probes: the parity of its person's index (probes come per person)."""
    return (torch.arange(n) // per_person) % 2


def analyse(final_records: Mapping[str, Mapping[str, Any]], statistics: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The analysis of route_eval.analysis on task 0 against task 1 (`statistics`: those to
    analyse, default every one the records hold), with each statistic's best point, the paper's
    cosine sweep, the controls and the deployable points."""
    sets = {name: _tensors(final_records[name]) for name in ("task0", "task1")}
    stats = [s for s in (statistics or STATISTICS) if stat_key(s) in sets["task0"]]
    out = analysis.analyse(("task0", sets["task0"]), ("task1", sets["task1"]), stats, "accuracy",
                           keep_old=KEEP_OLD, min_new_adapt=MIN_NEW_ADAPT)
    out["unit"] = UNIT
    for entry in out["statistics"].values():
        best = best_point(entry["points"])
        entry["best"] = best
        entry["goal_met"] = best["task0"] >= GOAL_TASK0 and best["task1"] >= GOAL_TASK1
    if "cosine" in stats:  # the paper's router: z_p where cos(z_p, z_a) >= tau, at every tau and at its 0.5
        cos = out["statistics"]["cosine"]
        out["paper"] = {"statistic": "cosine", "direction": "above",
                        "points": cos.get("paper_points", cos["points"] if cos["direction"] == "above" else None),
                        "at_tau": sweep(sets, "cosine", [PAPER_TAU], "accuracy")[0]}
    folds = {k: person_folds(len(v["correct_p"])) for k, v in sets.items()}
    out["deployable"] = {s: controls.crossfit(("task0", sets["task0"]), ("task1", sets["task1"]), s, "accuracy",
                                              keep_old=KEEP_OLD, old_folds=folds["task0"], new_folds=folds["task1"],
                                              min_new_adapt=MIN_NEW_ADAPT) for s in stats}
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
        dep = (analysis.get("deployable") or {}).get(stat)
        if dep:
            lines.append(f"  deployable ({stat}, tau calibrated on the other half of the people): task0 "
                         f"{dep['task0']:.3f} task1 {dep['task1']:.3f}")
    return lines

"""The biography benchmark's frontier: task-0 retention against task-1 learning, every method at
several task-1 learning rates and seeds (tools/biography_benchmark.py --task1-lrs ... --seeds ...).

Each method-and-LR run is a curve of (task-1 accuracy, task-0 accuracy) along its evaluations.
SCALE-Route adds, per router statistic, the routed accuracies of its last evaluation at every tau
(bio/router.py's sweep, no retraining) as a method of its own, "scale-route[<statistic>]".
The summary (reports/frontier.py): the best task-0 retention each method reaches at task-1
accuracy 0.5, 0.8 and 0.95, interpolated along its curves, best over LRs per seed, mean and
spread over seeds; and the area its frontier dominates.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from megatron_scale.reports import frontier_report
from megatron_scale.reports.frontier import Run
from megatron_scale.reports.frontier_report import Axes

LEVELS = (0.5, 0.8, 0.95)


def runs_of(results: Mapping[str, Any]) -> list[Run]:
    """Every curve of one benchmark run (one seed): one per method and LR, and per Route statistic
    its tau sweep at the last evaluation."""
    seed, default_lr = results["settings"]["seed"], results["settings"]["task1_lr"]
    out = []
    for key, r in results["methods"].items():
        method, lr = r.get("method", key), r.get("lr", default_lr)
        acc = r["accuracy"]
        out.append(Run(method, lr, seed, tuple(zip(acc["task1"], acc["task0"], strict=True))))
        for stat, a in ((r.get("router") or {}).get("statistics") or {}).items():
            out.append(Run(f"{method}[{stat}]", lr, seed, tuple((p["task1"], p["task0"]) for p in a["points"])))
    return out


AXES = Axes(new="task 1", old="task 0", new_name="task-1", old_name="task-0",
            new_label="task 1 learning (first-token accuracy, %)",
            old_label="task 0 retention (first-token accuracy, %)")


def runs_of_stages(out_dir: str) -> tuple[list[Run], dict[str, Any]]:
    """The curves of every task-1 stage finished so far under OUT/seed<N>/stages/ (a frontier
    still running, or stopped), and the settings they share; Route's sweeps are analysed from
    each stage's per-probe records as the benchmark does (bio/router.py)."""
    from megatron_scale.bio import router

    runs: list[Run] = []
    settings: dict[str, Any] = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "seed*", "stages", "task1_*.json"))):
        m = re.fullmatch(r"task1_(.+)_lr(.+)\.json", os.path.basename(path))
        if not m:
            continue
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        r = dict(doc["result"])
        if r.get("final_records"):
            r["router"] = router.analyse(r["final_records"])
        settings = doc["settings"]
        one = {"settings": {**settings, "task1_lr": float(m[2])}, "methods": {m[1]: {"method": m[1], "lr": float(m[2]), **r}}}
        runs += runs_of(one)
    return runs, settings


def title(settings: Mapping[str, Any], runs: Sequence[Run]) -> str:
    return (f"synthetic biographies: {settings['task1_people']} task-1 people, {settings['task1_iters']} steps, "
            f"LRs {sorted({r.lr for r in runs})}, seeds {sorted({r.seed for r in runs})}")


def write_frontier(runs: Sequence[Run], out_dir: str, title: str, levels: Sequence[float] = LEVELS) -> dict[str, str]:
    """frontier.json (the summary and every curve), frontier.md (the table) and frontier.png."""
    return frontier_report.write(runs, out_dir, title, levels, AXES)

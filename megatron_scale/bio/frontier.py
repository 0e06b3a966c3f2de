"""The biography benchmark's frontier: task-0 retention against task-1 learning, every method at
several task-1 learning rates and seeds (tools/biography_benchmark.py --task1-lrs ... --seeds ...).

Each method-and-LR run is a curve of (task-1 accuracy, task-0 accuracy) along its evaluations.
SCALE-Route adds, per router statistic, the routed accuracies of its last evaluation at every tau
(bio/router.py's sweep, no retraining) as a method of its own, "scale-route[<statistic>]".
The summary (evaluation/frontier.py): the best task-0 retention each method reaches at task-1
accuracy 0.5, 0.8 and 0.95, interpolated along its curves, best over LRs per seed, mean and
spread over seeds; and the area its frontier dominates.
"""

from __future__ import annotations

import glob
import json
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from megatron_scale.data.files import atomic_write
from megatron_scale.evaluation.frontier import Run, pareto, summarise, table

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


def mean_curves(runs: Sequence[Run]) -> dict[tuple[str, float], list[tuple[float, float]]]:
    """Per training curve's (method, LR): the mean over seeds at each evaluation (the seeds share
    their evaluation steps). Route's tau sweeps are left out: their taus are per-seed quantiles."""
    groups: dict[tuple[str, float], list[Run]] = {}
    for run in runs:
        if "[" not in run.method:
            groups.setdefault((run.method, run.lr), []).append(run)
    out = {}
    for key, rs in groups.items():
        n = min(len(r.curve) for r in rs)
        out[key] = [(statistics.fmean(r.curve[i][0] for r in rs), statistics.fmean(r.curve[i][1] for r in rs))
                    for i in range(n)]
    return out


def plot(runs: Sequence[Run], path: str, title: str) -> None:
    """Left: each method-and-LR's curve along training (mean over seeds). Right: each method's
    frontier (the staircase of its non-dominated points over its LRs, from the mean curves), and
    Route's tau sweeps per statistic for the first seed, dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = mean_curves(runs)
    methods = sorted({m for m, _ in curves})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    lrs = sorted({lr for _, lr in curves})
    markers = dict(zip(lrs, "os^vDP*X", strict=False))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for (method, lr), pts in sorted(curves.items()):
        left.plot([100 * p[0] for p in pts], [100 * p[1] for p in pts], "-", color=colours[method],
                  marker=markers.get(lr, "."), ms=4, lw=1, label=f"{method} lr {lr:g}")

    for method in methods:
        pts = [p for (m, _), c in curves.items() if m == method for p in c]
        front = pareto(pts)
        right.step([0.0] + [100 * n for n, _ in front], [100 * front[0][1]] + [100 * o for _, o in front],
                   where="pre", color=colours[method], lw=1.5, label=method)
    first = min((r.seed for r in runs), default=None)
    for i, stat in enumerate(sorted({r.method for r in runs if "[" in r.method})):
        pts = [p for r in runs if r.method == stat and r.seed == first for p in r.curve]
        front = pareto(pts)
        right.step([0.0] + [100 * n for n, _ in front], [100 * front[0][1]] + [100 * o for _, o in front],
                   where="pre", ls=":", lw=1.5, color=plt.get_cmap("Dark2")(i % 8), label=f"{stat}, every tau (seed {first})")
    left.set_title("along training (mean over seeds)")
    right.set_title("each method's frontier (over its LRs)")
    for ax in (left, right):
        ax.set_xlabel("task 1 learning (first-token accuracy, %)")
        ax.set_xlim(-2, 102)
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    left.set_ylabel("task 0 retention (first-token accuracy, %)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    tmp = f"{path}.partial-{os.getpid()}.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


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


def _order(runs: Sequence[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: (r.seed, r.method, r.lr))


def title(settings: Mapping[str, Any], runs: Sequence[Run]) -> str:
    return (f"synthetic biographies: {settings['task1_people']} task-1 people, {settings['task1_iters']} steps, "
            f"LRs {sorted({r.lr for r in runs})}, seeds {sorted({r.seed for r in runs})}")


def write_frontier(runs: Sequence[Run], out_dir: str, title: str, levels: Sequence[float] = LEVELS) -> dict[str, str]:
    """frontier.json (the summary and every curve), frontier.md (the table) and frontier.png."""
    runs = _order(runs)
    summary = summarise(runs, levels)
    paths = {k: os.path.join(out_dir, f"frontier.{k}") for k in ("json", "md", "png")}
    doc = {
        "levels": list(levels),
        "summary": {m: {"seeds": s["seeds"], "area": vars(s["area"]),
                        "levels": {str(level): vars(v) for level, v in s["levels"].items()}}  # type: ignore[union-attr]
                    for m, s in summary.items()},
        "runs": [{"method": r.method, "lr": r.lr, "seed": r.seed, "curve": r.curve} for r in runs],
    }
    atomic_write(paths["json"], (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    seeds = sorted({r.seed for r in runs})
    atomic_write(paths["md"], (f"Best task-0 retention at equal task-1 learning (seeds {seeds}; mean [min, max] "
                               "over seeds of the best over LRs)\n\n" + table(summary, levels)).encode("utf-8"))
    plot(runs, paths["png"], title)
    return paths

"""A frontier written out: frontier.json (the summary and every curve), frontier.md (the table) and
frontier.png (each method-and-LR's curve along training; each method's frontier over its LRs),
for any pair of scores: the biographies' task accuracies (reports/bio_frontier.py) and the real model's
Korean learning and English retention (reports/recipe_frontier.py) alike.

What differs between the two is only how the scores are named and drawn (`Axes`). A run whose
method name holds "[" (SCALE-Route's sweep over tau for one statistic, "scale-route[cosine]") is
not a training curve: it is drawn dotted on the right, for the first seed, and left out of the
mean curves.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from megatron_scale.artifacts import atomic_write, save_figure
from megatron_scale.reports.frontier import Run, pareto, summarise, table


@dataclass(frozen=True)
class Axes:
    """How the two scores are named and drawn: `new` and `old` name them in the table's columns
    ("task 1"), `new_name` and `old_name` in its heading ("task-1"), the labels on the plot; scores
    are drawn times `scale` (100: percent) within `limits` (None: matplotlib's own)."""

    new: str
    old: str
    new_name: str
    old_name: str
    new_label: str
    old_label: str
    scale: float = 100.0
    limits: tuple[float, float] | None = (-2.0, 102.0)


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


def _staircase(ax, front: list[tuple[float, float]], k: float, **style) -> None:  # type: ignore[no-untyped-def]
    ax.step([0.0] + [k * n for n, _ in front], [k * front[0][1]] + [k * o for _, o in front], where="pre", **style)


def plot(runs: Sequence[Run], path: str, title: str, axes: Axes) -> None:
    """Left: each method-and-LR's curve along training (mean over seeds). Right: each method's
    frontier (the staircase of its non-dominated points over its LRs, from the mean curves), and
    Route's tau sweeps per statistic for the first seed, dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = axes.scale
    curves = mean_curves(runs)
    methods = sorted({m for m, _ in curves})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    lrs = sorted({lr for _, lr in curves})
    markers = dict(zip(lrs, "os^vDP*X", strict=False))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for (method, lr), pts in sorted(curves.items()):
        left.plot([k * p[0] for p in pts], [k * p[1] for p in pts], "-", color=colours[method],
                  marker=markers.get(lr, "."), ms=4, lw=1, label=f"{method} lr {lr:g}")
    for method in methods:
        _staircase(right, pareto([p for (m, _), c in curves.items() if m == method for p in c]), k,
                   color=colours[method], lw=1.5, label=method)
    first = min((r.seed for r in runs), default=None)
    for i, stat in enumerate(sorted({r.method for r in runs if "[" in r.method})):
        pts = [p for r in runs if r.method == stat and r.seed == first for p in r.curve]
        _staircase(right, pareto(pts), k, ls=":", lw=1.5, color=plt.get_cmap("Dark2")(i % 8),
                   label=f"{stat}, every tau (seed {first})")
    left.set_title("along training (mean over seeds)")
    right.set_title("each method's frontier (over its LRs)")
    for ax in (left, right):
        ax.set_xlabel(axes.new_label)
        if axes.limits is not None:
            ax.set_xlim(*axes.limits)
            ax.set_ylim(*axes.limits)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    left.set_ylabel(axes.old_label)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write(runs: Sequence[Run], out_dir: str, title: str, levels: Sequence[float], axes: Axes,
          extra: dict | None = None) -> dict[str, str]:
    """frontier.json (the summary, every curve and `extra`), frontier.md (the table) and
    frontier.png under out_dir, each written atomically; returns their paths."""
    runs = sorted(runs, key=lambda r: (r.seed, r.method, r.lr))
    summary = summarise(runs, levels)
    paths = {k: os.path.join(out_dir, f"frontier.{k}") for k in ("json", "md", "png")}
    doc = {
        "levels": list(levels),
        "summary": {m: {"seeds": s["seeds"], "area": vars(s["area"]),
                        "levels": {str(level): vars(v) for level, v in s["levels"].items()}}  # type: ignore[union-attr]
                    for m, s in summary.items()},
        "runs": [{"method": r.method, "lr": r.lr, "seed": r.seed, "curve": r.curve} for r in runs],
        **(extra or {}),
    }
    atomic_write(paths["json"], (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    seeds = sorted({r.seed for r in runs})
    head = (f"Best {axes.old_name} retention at equal {axes.new_name} learning (seeds {seeds}; mean [min, max] "
            "over seeds of the best over LRs)\n\n")
    atomic_write(paths["md"], (head + table(summary, levels, new=axes.new, old=axes.old)).encode("utf-8"))
    plot(runs, paths["png"], title, axes)
    return paths

"""A frontier written out: frontier.json (the summary and every curve), frontier.md (the table) and
frontier.png (each method-and-LR's curve along training; each method's frontier over its LRs),
for any pair of scores: the biographies' task accuracies (reports/bio_frontier.py) and the real model's
Korean learning and English retention (reports/recipe_frontier.py) alike.

What differs between the two is only how the scores are named and drawn (`Axes`). A run whose
method name holds "[" (SCALE-Route's sweep over tau for one statistic, "scale-route[cosine]", or
a control swept over its own knob) is not a training curve: it is drawn dotted on the right, for
the first seed, and left out of the mean curves.

Besides the table: which cells are chords (frontier.cell_at; marked "~" in the tables, drawn as
open circles), seed-paired differences for the `pairs` asked for, and single operating points
(`Marker`: a deployable router, tau fixed on held-out data) beside the in-sample envelope of the
sweep they come from. Every table (and the plot's cells) is given for the three readings of
retention (frontier.as_retention): raw, the capped mean min(mean, 1) and the per-set capped mean
of min(r_s, 1), each said to equal the raw one where it does.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from megatron_scale.durable import atomic_write, save_figure
from megatron_scale.reports.frontier import (
    CAPPED, PER_SET, RAW, RETENTIONS, Point, Run, as_retention, default_gap, optimum_table, paired, paired_table,
    pareto, retention_at, spread, summarise, table,
)


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
    old_sets: int = 1
    """How many old-domain sets the old score is the mean of (per-set capping needs a run's parts)."""


@dataclass(frozen=True)
class Marker:
    """One operating point of one run (a router with its tau fixed before it saw the evaluated
    data), shown beside `envelope`: the in-sample sweep of the same LR and seed."""

    name: str
    lr: float
    seed: int
    point: Point
    envelope: str


def mean_curves(runs: Sequence[Run]) -> dict[tuple[str, float], list[tuple[float, float]]]:
    """Per training curve's (method, LR): the mean over seeds at each evaluation (the seeds share
    their evaluation steps; a run stopped early cuts the mean to its length). Route's tau sweeps
    are left out: their taus are per-seed quantiles."""
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


def markers_table(markers: Sequence[Marker], runs: Sequence[Run], axes: Axes) -> str:
    """Markdown: per marker name and LR, its new and old scores (mean [min, max] over seeds), the
    envelope's old score at the marker's own new score on the same seed, and the marker minus the
    envelope, paired per seed."""
    by_key: dict[tuple[str, float], list[Marker]] = {}
    for m in markers:
        by_key.setdefault((m.name, m.lr), []).append(m)
    curves = {(r.method, r.lr, r.seed): r.curve for r in runs}
    lines = [f"| operating point | LR | seeds | {axes.new} | {axes.old} | in-sample envelope's {axes.old} there "
             "| point - envelope |", "|---|---|---|---|---|---|---|"]
    for (name, lr), ms in sorted(by_key.items()):
        env = [retention_at(curves.get((m.envelope, m.lr, m.seed), ()), m.point[0]) for m in ms]
        both = [(m, e) for m, e in zip(ms, env, strict=True) if e is not None]
        lines.append(f"| {name} | {lr:g} | {len(ms)} | {spread([m.point[0] for m in ms])} | {spread([m.point[1] for m in ms])} "
                     f"| {spread([e for _, e in both])} | {_signed(spread([m.point[1] - e for m, e in both]))} |")
    return "\n".join(lines) + "\n"


def _signed(s: Any) -> str:
    return str(s) if getattr(s, "n", 0) == 0 else f"{s.mean:+.3f}" + ("" if s.n == 1 else f" [{s.low:+.3f}, {s.high:+.3f}]")


def _staircase(ax: Any, front: list[tuple[float, float]], k: float, **style: Any) -> None:
    ax.step([0.0] + [k * n for n, _ in front], [k * front[0][1]] + [k * o for _, o in front], where="pre", **style)


def plot(runs: Sequence[Run], path: str, title: str, axes: Axes, *, levels: Sequence[float] = (),
         max_gap: float | None = None, markers: Sequence[Marker] = ()) -> None:
    """Left: each method-and-LR's curve along training (mean over seeds), segments wider than
    max_gap dotted. Right: each method's frontier (the staircase of its non-dominated points over
    its LRs, from the mean curves), Route's tau sweeps per statistic for the first seed, dotted,
    each method's table cells at `levels` (filled: measured in every seed; open: a chord in one
    at least) and the markers (stars, the mean over seeds of each marker and LR)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = axes.scale
    gap = default_gap(levels) if max_gap is None and levels else (math.inf if max_gap is None else max_gap)
    curves = mean_curves(runs)
    methods = sorted({m for m, _ in curves})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    sweeps = sorted({r.method for r in runs if "[" in r.method})
    colours.update({s: plt.get_cmap("Dark2")(i % 8) for i, s in enumerate(sweeps)})
    lrs = sorted({lr for _, lr in curves})
    markers_of_lr = dict(zip(lrs, "os^vDP*X", strict=False))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    for (method, lr), pts in sorted(curves.items()):
        xs, ys = [k * p[0] for p in pts], [k * p[1] for p in pts]
        left.plot(xs, ys, "", color=colours[method], marker=markers_of_lr.get(lr, "."), ms=3, lw=0,
                  label=f"{method} lr {lr:g}")
        for i in range(1, len(pts)):
            wide = abs(pts[i][0] - pts[i - 1][0]) > gap
            left.plot(xs[i - 1 : i + 1], ys[i - 1 : i + 1], ":" if wide else "-", color=colours[method], lw=1)
    for method in methods:
        _staircase(right, pareto([p for (m, _), c in curves.items() if m == method for p in c]), k,
                   color=colours[method], lw=1.5, label=method)
    first = min((r.seed for r in runs), default=None)
    for stat in sweeps:
        pts = [p for r in runs if r.method == stat and r.seed == first for p in r.curve]
        if pts:
            _staircase(right, pareto(pts), k, ls=":", lw=1.5, color=colours[stat], label=f"{stat}, every knob (seed {first})")
    if levels:
        summary = summarise(runs, levels, max_gap=max_gap)
        for method, s in summary.items():
            for level, v in s["levels"].items():
                if v.n:
                    right.plot([k * level], [k * v.mean], "o", ms=6, color=colours[method],
                               markerfacecolor=colours[method] if not v.chords else "none")
        for mode, mark in ((CAPPED, "+"), (PER_SET, "x")):  # the capped readings, where they differ from raw
            for method, s in summarise(as_retention(runs, mode, axes.old_sets)[0], levels, max_gap=max_gap).items():
                for level, v in s["levels"].items():
                    raw = summary[method]["levels"][level]
                    if v.n and abs(v.mean - raw.mean) > 1e-12:
                        right.plot([k * level], [k * v.mean], mark, ms=7, color=colours[method])
    grouped: dict[tuple[str, float], list[Marker]] = {}
    for m in markers:
        grouped.setdefault((m.name, m.lr), []).append(m)
    for ms in grouped.values():  # one star per marker and LR: the mean over its seeds
        right.plot([k * statistics.fmean(m.point[0] for m in ms)], [k * statistics.fmean(m.point[1] for m in ms)], "*",
                   ms=9, color=colours.get(ms[0].envelope, "black"), markeredgecolor="black", markeredgewidth=0.5)
    left.set_title("along training (mean over seeds; dotted: evaluations further apart than a cell may be)", fontsize=8)
    right.set_title("each method's frontier over its LRs; circles: table cells (open: a chord in a seed at least; "
                    "+ capped mean, x per-set capped, where they differ), stars: deployable points (mean over seeds)",
                    fontsize=7)
    for ax in (left, right):
        ax.set_xlabel(axes.new_label)
        if axes.limits is not None:
            ax.set_xlim(*axes.limits)
            ax.set_ylim(*axes.limits)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5, loc="lower left", ncol=2)
    left.set_ylabel(axes.old_label)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def _summary_json(summary: Mapping[str, Mapping[str, Any]]) -> dict:
    return {m: {"seeds": s["seeds"], "lrs": s["lrs"], "area": vars(s["area"]),
                "levels": {str(level): vars(v) for level, v in s["levels"].items()}}
            for m, s in summary.items()}


def write(runs: Sequence[Run], out_dir: str, title: str, levels: Sequence[float], axes: Axes,
          extra: dict | None = None, *, max_gap: float | None = None, pairs: Sequence[tuple[str, str]] = (),
          markers: Sequence[Marker] = (), sections: Sequence[tuple[str, Sequence[str]]] = (),
          notes: str = "") -> dict[str, str]:
    """frontier.json (the summaries of the three retentions, every curve and its parts, the paired
    differences, the markers and `extra`), frontier.md (per retention: the table, one per section
    (title, methods) if given, then the rest, or the line saying it is the raw one; which LR is best;
    the paired differences; then the markers and `notes`) and frontier.png under out_dir, each
    written atomically; returns their paths."""
    runs = sorted(runs, key=lambda r: (r.seed, r.method, r.lr))
    gap = default_gap(levels) if max_gap is None else max_gap
    readings: dict[str, tuple[dict, list[Run]]] = {}
    for mode in (RAW, CAPPED, PER_SET):
        kept, left = as_retention(runs, mode, axes.old_sets)
        readings[mode] = (summarise(kept, levels, max_gap=gap), left)
    summary = readings[RAW][0]
    above_one = any(o > 1.0 for r in runs for _, o in r.curve)
    part_above_one = any(v > 1.0 for r in runs for p in r.parts for v in p)

    def pair_docs(of: Mapping[str, Mapping[str, Any]]) -> list[dict]:
        return [{"a": a, "b": b, "level": lv, **vars((d := paired(of, a, b, lv)).diff), "ahead": d.ahead,
                 "chords": d.chords} for a, b in pairs if a in of and b in of for lv in levels]

    paths = {k: os.path.join(out_dir, f"frontier.{k}") for k in ("json", "md", "png")}
    doc = {
        "levels": list(levels), "max_gap": gap,
        "summary": _summary_json(summary),
        "summary_capped_at_1": _summary_json(readings[CAPPED][0]),
        "summary_per_set_capped": _summary_json(readings[PER_SET][0]),
        "retentions": RETENTIONS, "old_sets": axes.old_sets,
        "per_set_left_out": sorted({f"{r.method} lr {r.lr:g} seed {r.seed}" for r in readings[PER_SET][1]}),
        "paired": pair_docs(summary),
        "paired_capped_at_1": pair_docs(readings[CAPPED][0]),
        "paired_per_set_capped": pair_docs(readings[PER_SET][0]),
        "markers": [vars(m) for m in markers],
        "runs": [{"method": r.method, "lr": r.lr, "seed": r.seed, "curve": r.curve, **({"parts": r.parts} if r.parts else {})}
                 for r in runs],
        **(extra or {}),
    }
    atomic_write(paths["json"], (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    seeds = sorted({r.seed for r in runs})
    kw = {"new": axes.new, "old": axes.old}
    text = [f"Best {axes.old_name} retention at equal {axes.new_name} learning (seeds {seeds}; mean [min, max] "
            "over seeds of the best over LRs)\n"]

    def tables(of: Mapping[str, Mapping[str, Any]]) -> list[str]:
        out, shown = [], set()
        for name, methods in sections:
            out += [f"**{name}**\n", table(of, levels, methods=methods, **kw)]
            shown |= set(methods)
        rest = [m for m in of if m not in shown]
        if rest:
            out += (["**Other rows**\n"] if sections else []) + [table(of, levels, methods=rest, **kw)]
        return out

    same = {RAW: False, CAPPED: not above_one, PER_SET: not above_one and not part_above_one}
    for mode, (of, left) in readings.items():
        heading = f"### {axes.old_name} retention, {RETENTIONS[mode]}\n"
        if mode == PER_SET and axes.old_sets == 1:
            text += [heading, "One old set: per-set capping is the capped mean above.\n"]
            continue
        if same[mode]:
            text += [heading, f"No {axes.old_name} retention exceeds 1 (nor any set's): the raw table holds.\n"]
            continue
        text += [heading, *tables(of)]
        if left:
            text.append("Left out (no per-set retentions recorded: a curve from an earlier frontier.json without "
                        "them): " + ", ".join(sorted({f"{r.method} lr {r.lr:g} seed {r.seed}" for r in left})) + ".\n")
        if mode == RAW and any(v.chords for s in of.values() for v in s["levels"].values()):
            text.append(f"~: in (~k/n) of the seeds the best value is a chord: its two bracketing evaluations are "
                        f"more than {gap:g} apart in {axes.new_name} learning, so no evaluation looked near the "
                        "level; it is interpolated, not measured.\n")
        trained = [m for m in of if "[" not in m and len(of[m]["lrs"]) > 1]
        if trained:
            text += [f"Which LR gives each seed's best ({mode}; a method's optimum is bracketed where it is interior):\n",
                     optimum_table(of, levels, new=axes.new, methods=trained)]
        if pairs and pair_docs(of):
            text += [f"Paired differences ({mode}), a - b per seed (each seed's best over LRs): mean [min, max] sd, "
                     "and in how many seeds a is ahead\n", paired_table(of, pairs, levels, new=axes.new)]
    if markers:
        text += ["Deployable operating points (tau and direction fixed before the evaluated data are seen: calibrated "
                 "on held-out data, or the paper's own tau) beside the in-sample envelope of the same run\n",
                 markers_table(markers, runs, axes)]
    if notes:
        text.append(notes)
    atomic_write(paths["md"], "\n".join(text).encode("utf-8"))
    plot(runs, paths["png"], title, axes, levels=levels, max_gap=gap, markers=markers)
    return paths

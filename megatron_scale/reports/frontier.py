"""The stability-plasticity frontier: methods compared at equal learning, not at one point each.

A *curve* is one training run seen along its evaluations: a list of points (new, old), the
new-domain score (task-1 accuracy, or Korean learning) and the old-domain score (task-0 accuracy,
or English retention), both higher-is-better, in evaluation order. A method has several curves
(learning rates, seeds; for SCALE-Route also the routed points at every tau of a statistic).

- `cell_at(curve, level, max_gap)`: the old-domain score where the curve's new-domain score is
  `level`, interpolated linearly between the two evaluations that bracket it, the best over every
  crossing (a curve may cross a level more than once); None when the curve never reaches it.
  The cell is *measured* when an evaluation lies on the level or its two bracketing evaluations
  are at most `max_gap` apart in the new-domain score; otherwise it is a chord across a gap
  the evaluations never looked inside, and tables mark it "~". `retention_at` is its value.
- `pareto(points)`: the points no other point beats on both scores.
- `area(points)`: the area the points dominate in [0, 1]^2 from the origin (the hypervolume:
  the union of the rectangles [0, new] x [0, old]); the frontier's area, 1 for a method that
  learns everything and forgets nothing.
- `summarise(runs, levels)`: per method and level, the best retention over the method's learning
  rates, per seed, then the mean and spread (min, max, SD) over seeds, and how many seeds' best
  is a chord; the same for the area. `cap` caps every old-domain score first (retention capped
  at 1: no credit for improving on the base).
- `paired(summary, a, b, level)`: method a minus method b per seed (each seed's best over its
  LRs; the seeds share their pre-trained and task-0 models), with the mean and spread of the
  differences and in how many seeds a is ahead.
- `as_retention(runs, mode)`: the curves with their old-domain score read three ways, where it is
  a mean over several old sets s of r_s (a Run's `parts`: each evaluation's r_s):
      RAW       mean_s r_s                 (the curve as it is)
      CAPPED    min(mean_s r_s, 1)         no credit for improving on the base, on the mean
      PER_SET   mean_s min(r_s, 1)         ... on each set: a gain on one set cannot hide a loss on another
  Always PER_SET <= CAPPED <= RAW, all three equal where no r_s exceeds 1; with one old set
  PER_SET is CAPPED. A curve of several sets without its parts has no PER_SET.

Pure Python: the recipe and the plots use it without torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Point = tuple[float, float]  # (new-domain score, old-domain score)


def _check(points: Sequence[Point], what: str) -> None:
    for p in points:
        if len(p) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in p):
            raise ValueError(f"{what}: every point must be (new, old), two finite numbers; got {p!r}")


@dataclass(frozen=True)
class Cell:
    """The old-domain score at one new-domain level of one curve: its value, whether it is
    measured, and the two evaluations it lies between (the same one twice where one is on it)."""

    value: float
    measured: bool
    bracket: tuple[Point, Point]

    @property
    def gap(self) -> float:
        return abs(self.bracket[1][0] - self.bracket[0][0])


def default_gap(levels: Sequence[float]) -> float:
    """The widest bracket a measured cell may have: the smallest spacing between two levels (a
    bracket wider than that could hold a whole other level); one level alone: the level itself."""
    ordered = sorted(set(levels))
    if len(ordered) < 2:
        return abs(ordered[0]) if ordered else math.inf
    return min(b - a for a, b in zip(ordered, ordered[1:]))


def cell_at(curve: Sequence[Point], level: float, max_gap: float = math.inf) -> Cell | None:
    """The best old-domain score at new-domain score `level` along the curve (linear between
    consecutive evaluations, measured or not as the module says); None when no point or segment
    of the curve reaches `level`. Among equal values a measured cell wins."""
    _check(curve, "curve")
    if not max_gap >= 0:
        raise ValueError(f"max_gap must be >= 0, got {max_gap!r}")
    best: Cell | None = None

    def offer(cell: Cell) -> None:
        nonlocal best
        if best is None or (cell.value, cell.measured) > (best.value, best.measured):
            best = cell

    for i, (new, old) in enumerate(curve):
        if new == level:
            offer(Cell(old, True, ((new, old), (new, old))))
        if i == 0:
            continue
        new0, old0 = curve[i - 1]
        if (new0 - level) * (new - level) < 0:  # the segment crosses the level strictly inside
            at = old0 + (old - old0) * (level - new0) / (new - new0)
            offer(Cell(at, abs(new - new0) <= max_gap + 1e-9, ((new0, old0), (new, old))))  # 18/120 is 0.15
    return best


def retention_at(curve: Sequence[Point], level: float) -> float | None:
    """The best old-domain score at new-domain score `level` along the curve (cell_at's value)."""
    cell = cell_at(curve, level)
    return None if cell is None else cell.value


def capped(curve: Sequence[Point], cap: float | None) -> tuple[Point, ...]:
    """The curve with every old-domain score capped at `cap` (None: unchanged)."""
    return tuple(curve) if cap is None else tuple((n, min(o, cap)) for n, o in curve)


def pareto(points: Iterable[Point]) -> list[Point]:
    """The non-dominated points, by increasing new-domain score (so decreasing old-domain score)."""
    pts = list(points)
    _check(pts, "points")
    front: list[Point] = []
    for new, old in sorted(set(pts), key=lambda p: (-p[0], -p[1])):
        if not front or old > front[-1][1]:
            front.append((new, old))
    return front[::-1]


def area(points: Iterable[Point]) -> float:
    """The area dominated by `points` inside [0, 1]^2, measured from the origin (scores are
    clipped to [0, 1]): the union of the rectangles [0, new] x [0, old]."""
    front = pareto([(min(max(n, 0.0), 1.0), min(max(o, 0.0), 1.0)) for n, o in points])
    total, left = 0.0, 0.0
    for new, old in front:  # increasing new, decreasing old: a staircase
        total += (new - left) * old
        left = new
    return total


@dataclass(frozen=True)
class Run:
    """One training run of one method: its learning rate, seed and curve (or a Route sweep); `parts`,
    where the old-domain score is a mean over several sets, each point's per-set scores (the
    curve's old score is their mean), for as_retention's PER_SET; () where there is one set."""

    method: str
    lr: float
    seed: int
    curve: tuple[Point, ...]
    parts: tuple[tuple[float, ...], ...] = ()


RAW, CAPPED, PER_SET = "raw", "capped mean", "per-set capped"
RETENTIONS = {
    RAW: "raw: the mean over the old sets of each set's retention",
    CAPPED: "capped mean: min(mean over the old sets, 1), no credit for improving on the base",
    PER_SET: "per-set capped: the mean over the old sets of min(each set's retention, 1), so that a gain on "
             "one set cannot offset a loss on another",
}
"""The three readings of a mean retention over several old sets (as_retention), as tables name them."""


def per_set_capped(parts: Sequence[float]) -> float:
    """The mean over sets of min(r_s, 1)."""
    if not parts:
        raise ValueError("per-set capping needs each set's retention")
    return statistics.fmean(min(r, 1.0) for r in parts)


def as_retention(runs: Iterable[Run], mode: str, old_sets: int = 1) -> tuple[list[Run], list[Run]]:
    """(the runs with each old-domain score read as `mode` (RAW, CAPPED, PER_SET; see the module's
    text), the runs left out): with `old_sets` > 1, PER_SET needs a run's parts, and a run without
    them is left out rather than scored as its capped mean."""
    if mode not in RETENTIONS:
        raise ValueError(f"retention {mode!r}: one of {', '.join(RETENTIONS)}")
    kept, left = [], []
    for r in runs:
        if mode == RAW:
            kept.append(r)
        elif mode == CAPPED or (old_sets == 1 and not r.parts):
            kept.append(Run(r.method, r.lr, r.seed, capped(r.curve, 1.0), r.parts))
        elif len(r.parts) != len(r.curve) or any(len(p) != old_sets for p in r.parts):
            left.append(r)
        else:
            kept.append(Run(r.method, r.lr, r.seed, tuple((n, per_set_capped(p)) for (n, _), p in
                                                          zip(r.curve, r.parts, strict=True)), r.parts))
    return kept, left


@dataclass(frozen=True)
class Spread:
    """A value over seeds: mean, min, max, SD (0 for one seed), the seeds that have one, each
    seed's value and whether it is measured (a chord: not)."""

    mean: float
    low: float
    high: float
    n: int  # seeds with a value (a seed whose runs never reach a level has none)
    sd: float = math.nan
    seeds: tuple[int, ...] = ()
    values: tuple[float, ...] = ()
    measured: tuple[bool, ...] = ()
    lrs: tuple[float, ...] = ()  # the learning rate whose run gave each seed's value (where one did)

    @property
    def chords(self) -> int:
        """Seeds whose value is a chord, not a measurement."""
        return sum(not m for m in self.measured)

    def __str__(self) -> str:
        if self.n == 0:
            return "not reached"
        text = f"{self.mean:.3f}" if self.n == 1 else f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"
        return f"~{text} (~{self.chords}/{self.n})" if self.chords else text


def spread(values: Sequence[float], seeds: Sequence[int] = (), measured: Sequence[bool] | None = None,
           lrs: Sequence[float] = ()) -> Spread:
    """The Spread of per-seed values (measured: all, unless told)."""
    values = list(values)
    if not values:
        return Spread(math.nan, math.nan, math.nan, 0)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return Spread(statistics.fmean(values), min(values), max(values), len(values), sd, tuple(seeds),
                  tuple(values), tuple(measured) if measured is not None else (True,) * len(values), tuple(lrs))


def summarise(runs: Iterable[Run], levels: Sequence[float], *, max_gap: float | None = None,
              cap: float | None = None) -> dict[str, dict[str, Any]]:
    """Per method: {"levels": {level: Spread of the best retention over its learning rates per
    seed}, "area": Spread of the per-seed frontier area (every point of every learning rate),
    "seeds": n}. A level no run of a seed reaches counts for that seed as not reached. A seed's
    cell is a chord when its best is (max_gap None: default_gap(levels)); `cap` caps retention."""
    gap = default_gap(levels) if max_gap is None else max_gap
    by_method: dict[str, dict[int, list[Run]]] = {}
    for run in runs:
        by_method.setdefault(run.method, {}).setdefault(run.seed, []).append(run)
    out: dict[str, dict[str, Any]] = {}
    for method, seeds in by_method.items():
        per_level: dict[float, Spread] = {}
        for level in levels:
            best: dict[int, tuple[Cell, float]] = {}
            for seed, seed_runs in sorted(seeds.items()):
                cells = [(c, r.lr) for r in seed_runs if (c := cell_at(capped(r.curve, cap), level, gap)) is not None]
                if cells:
                    best[seed] = max(cells, key=lambda c: (c[0].value, c[0].measured))
            per_level[level] = spread([c.value for c, _ in best.values()], list(best),
                                      [c.measured for c, _ in best.values()], [lr for _, lr in best.values()])
        ordered = sorted(seeds.items())
        areas = [area(p for run in seed_runs for p in capped(run.curve, cap)) for _, seed_runs in ordered]
        out[method] = {"levels": per_level, "area": spread(areas, [s for s, _ in ordered]), "seeds": len(seeds),
                       "lrs": sorted({r.lr for rs in seeds.values() for r in rs})}
    return out


def optimum_table(summary: Mapping[str, Mapping[str, Any]], levels: Sequence[float], *, new: str = "task 1",
                  methods: Sequence[str] | None = None) -> str:
    """Markdown: per method, the LRs it ran at and, per level, each seed's best LR and in how many
    seeds that LR is interior to the grid (neither its lowest nor its highest LR; a level the
    lowest or highest LR wins may have its optimum outside the grid)."""
    head = " | ".join(f"best LR per seed at {new} = {level:g}" for level in levels)
    lines = [f"| method | LRs run | {head} |", "|---|---|" + "---|" * len(levels)]
    for method in summary if methods is None else [m for m in methods if m in summary]:
        s = summary[method]
        grid = s["lrs"]
        cells = []
        for level in levels:
            v = s["levels"][level]
            if not v.n:
                cells.append("not reached")
                continue
            inside = sum(grid[0] < lr < grid[-1] for lr in v.lrs)
            cells.append(", ".join(f"{lr:g}" for lr in v.lrs) + f" (interior {inside}/{v.n})")
        lines.append(f"| {method} | {', '.join(f'{lr:g}' for lr in grid)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Paired:
    """Method a minus method b at one level, over the seeds where both have a value."""

    a: str
    b: str
    level: float
    diff: Spread  # its values are the per-seed differences
    ahead: int  # seeds where a - b > 0
    chords: int  # seeds where either side's value is a chord

    def __str__(self) -> str:
        d = self.diff
        if d.n == 0:
            return "no common seed"
        text = f"{d.mean:+.3f}" if d.n == 1 else f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] sd {d.sd:.3f}"
        return f"{text}, {self.ahead}/{d.n} > 0" + (f" (~{self.chords} chord)" if self.chords else "")


def paired(summary: Mapping[str, Mapping[str, Any]], a: str, b: str, level: float) -> Paired:
    """a - b per seed at `level` from summarise's per-seed bests."""
    sa, sb = (summary[m]["levels"][level] for m in (a, b))
    va = dict(zip(sa.seeds, zip(sa.values, sa.measured, strict=True), strict=True))
    vb = dict(zip(sb.seeds, zip(sb.values, sb.measured, strict=True), strict=True))
    common = sorted(set(va) & set(vb))
    diffs = [va[s][0] - vb[s][0] for s in common]
    chords = sum(not (va[s][1] and vb[s][1]) for s in common)
    return Paired(a, b, level, spread(diffs, common), sum(d > 0 for d in diffs), chords)


def table(summary: Mapping[str, Mapping[str, Any]], levels: Sequence[float], *,
          new: str = "task 1", old: str = "task 0", methods: Sequence[str] | None = None) -> str:
    """Markdown: one row per method (all, or `methods` in that order), the best `old` retention at
    each `new` level and the area."""
    head = " | ".join(f"{old} at {new} = {level:g}" for level in levels)
    lines = [f"| method | seeds | {head} | frontier area |", "|---|---|" + "---|" * len(levels) + "---|"]
    for method in summary if methods is None else [m for m in methods if m in summary]:
        s = summary[method]
        cells = " | ".join(str(s["levels"][level]) for level in levels)
        lines.append(f"| {method} | {s['seeds']} | {cells} | {s['area']} |")
    return "\n".join(lines) + "\n"


def paired_table(summary: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]],
                 levels: Sequence[float], *, new: str = "task 1") -> str:
    """Markdown: one row per pair (a, b) present in the summary, a - b per seed at each level:
    mean [min, max] sd, and in how many seeds a is ahead."""
    head = " | ".join(f"at {new} = {level:g}" for level in levels)
    lines = [f"| a - b | {head} |", "|---|" + "---|" * len(levels)]
    for a, b in pairs:
        if a in summary and b in summary:
            lines.append(f"| {a} - {b} | " + " | ".join(str(paired(summary, a, b, lv)) for lv in levels) + " |")
    return "\n".join(lines) + "\n"


def best_lr_table(runs: list[Run], levels: list[float]) -> str:
    """Markdown: per trained method and seed, the LR whose curve keeps the most at each level (its
    retention), and the LRs tried: an optimum at the grid's edge says the grid should go on."""
    lines = ["| method | seed | LRs tried | " + " | ".join(f"best LR at {lv:g}" for lv in levels) + " |",
             "|---|---|---|" + "---|" * len(levels)]
    trained = [r for r in runs if "[" not in r.method]
    for method in dict.fromkeys(r.method for r in trained):
        for seed in sorted({r.seed for r in trained if r.method == method}):
            mine = [r for r in trained if r.method == method and r.seed == seed]
            lrs = sorted({r.lr for r in mine})
            cells = []
            for lv in levels:
                got = [(v, r.lr) for r in mine if (v := retention_at(r.curve, lv)) is not None]
                if not got:
                    cells.append("not reached")
                    continue
                v, lr = max(got)
                edge = " (edge)" if len(lrs) > 1 and lr in (lrs[0], lrs[-1]) else ""
                cells.append(f"{lr:g}{edge}: {v:.3f}")
            lines.append(f"| {method} | {seed} | {', '.join(f'{x:g}' for x in lrs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


RUN_LEVELS = (0.05, 0.1, 0.2)
"""The real model's learning levels: the recipe's frontier (reports/recipe_frontier.py LEVELS) and its runs' cells."""


def run_cells_table(runs: Iterable[Mapping[str, Any]], levels: Sequence[float] = RUN_LEVELS) -> str:
    """Markdown: each training run's own cells (one run, not the best over LRs as `table` shows):
    its old-domain score at each level, read with `cell_at` at no gap ("~" would mark a chord),
    and its last point. `runs` are frontier.json's "runs" (reports/frontier_report.py); a run whose
    method holds "[" (a router's or a control's sweep: many curves per run) is left out."""
    lines = ["| method | LR | seed | " + " | ".join(f"{100 * lv:g} %" for lv in levels)
             + " | last learning (retention) |\n|---|---|---|" + "---|" * len(levels) + "---|"]
    for r in runs:
        if "[" in str(r["method"]):
            continue
        curve: list[Point] = [(float(p[0]), float(p[1])) for p in r["curve"]]
        cells = []
        for level in levels:
            c = cell_at(curve, level)
            cells.append("not reached" if c is None else f"{'' if c.measured else '~'}{c.value:.4f}")
        learned, kept = curve[-1]
        lines.append(f"| {r['method']} | {float(r['lr']):g} | {r['seed']} | {' | '.join(cells)} | "
                     f"{100 * learned:.1f} % ({kept:.4f}) |")
    return "\n".join(lines) + "\n"

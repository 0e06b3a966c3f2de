"""The stability-plasticity frontier: methods compared at equal learning, not at one point each.

A *curve* is one training run seen along its evaluations: a list of points (new, old), the
new-domain score (task-1 accuracy, or Korean learning) and the old-domain score (task-0 accuracy,
or English retention), both higher-is-better, in evaluation order. A method has several curves
(learning rates, seeds; for SCALE-Route also the routed points at every tau of a statistic).

- `retention_at(curve, level)`: the old-domain score where the curve's new-domain score is
  `level`, interpolated linearly between the two evaluations that bracket it, the best over every
  crossing (a curve may cross a level more than once); None when the curve never reaches it.
- `pareto(points)`: the points no other point beats on both scores.
- `area(points)`: the area the points dominate in [0, 1]^2 from the origin (the hypervolume:
  the union of the rectangles [0, new] x [0, old]); the frontier's area, 1 for a method that
  learns everything and forgets nothing.
- `summarise(runs, levels)`: per method and level, the best retention over the method's learning
  rates, per seed, then the mean and spread (min, max) over seeds; the same for the area.

Pure Python: the recipe and the plots use it without torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Point = tuple[float, float]  # (new-domain score, old-domain score)


def _check(points: Sequence[Point], what: str) -> None:
    for p in points:
        if len(p) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in p):
            raise ValueError(f"{what}: every point must be (new, old), two finite numbers; got {p!r}")


def retention_at(curve: Sequence[Point], level: float) -> float | None:
    """The best old-domain score at new-domain score `level` along the curve (linear between
    consecutive evaluations); None when no point or segment of the curve reaches `level`."""
    _check(curve, "curve")
    best: float | None = None
    for i, (new, old) in enumerate(curve):
        if new == level:
            best = old if best is None else max(best, old)
        if i == 0:
            continue
        new0, old0 = curve[i - 1]
        if (new0 - level) * (new - level) < 0:  # the segment crosses the level strictly inside
            at = old0 + (old - old0) * (level - new0) / (new - new0)
            best = at if best is None else max(best, at)
    return best


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
    """One training run of one method: its learning rate, seed and curve (or a Route sweep)."""

    method: str
    lr: float
    seed: int
    curve: tuple[Point, ...]


@dataclass(frozen=True)
class Spread:
    mean: float
    low: float
    high: float
    n: int  # seeds with a value (a seed whose runs never reach a level has none)

    def __str__(self) -> str:
        if self.n == 0:
            return "not reached"
        return f"{self.mean:.3f}" if self.n == 1 else f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _spread(values: list[float]) -> Spread:
    if not values:
        return Spread(math.nan, math.nan, math.nan, 0)
    return Spread(statistics.fmean(values), min(values), max(values), len(values))


def summarise(runs: Iterable[Run], levels: Sequence[float]) -> dict[str, dict[str, object]]:
    """Per method: {"levels": {level: Spread of the best retention over its learning rates per
    seed}, "area": Spread of the per-seed frontier area (every point of every learning rate),
    "seeds": n}. A level no run of a seed reaches counts for that seed as not reached."""
    by_method: dict[str, dict[int, list[Run]]] = {}
    for run in runs:
        by_method.setdefault(run.method, {}).setdefault(run.seed, []).append(run)
    out: dict[str, dict[str, object]] = {}
    for method, seeds in by_method.items():
        per_level: dict[float, Spread] = {}
        for level in levels:
            best = []
            for seed_runs in seeds.values():
                reached = [r for r in (retention_at(run.curve, level) for run in seed_runs) if r is not None]
                if reached:
                    best.append(max(reached))
            per_level[level] = _spread(best)
        areas = [area(p for run in seed_runs for p in run.curve) for seed_runs in seeds.values()]
        out[method] = {"levels": per_level, "area": _spread(areas), "seeds": len(seeds)}
    return out


def table(summary: Mapping[str, Mapping[str, object]], levels: Sequence[float], *,
          new: str = "task 1", old: str = "task 0") -> str:
    """Markdown: one row per method, the best `old` retention at each `new` level and the area."""
    head = " | ".join(f"{old} at {new} = {level:g}" for level in levels)
    lines = [f"| method | seeds | {head} | frontier area |", "|---|---|" + "---|" * len(levels) + "---|"]
    for method, s in summary.items():
        cells = " | ".join(str(s["levels"][level]) for level in levels)  # type: ignore[index]
        lines.append(f"| {method} | {s['seeds']} | {cells} | {s['area']} |")
    return "\n".join(lines) + "\n"

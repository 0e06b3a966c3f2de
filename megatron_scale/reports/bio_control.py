"""The gate against the routed control at matched task-1 levels (science review 5, C5).

The gated SCALE-Preserve (bio/variant.py: z_a's new term weighted by a gate on z_p's statistic)
answers a probe with the base's head where the task-0 model is confident. The fair baseline does
the same with no SCALE width: the task-0 model z_p and a fully fine-tuned model z_a, each probe
answered by z_p where z_p's statistic passes the gate's own rule (max-prob >= tau, say), else by
z_a. Its point is (routed task-1 accuracy, routed task-0 accuracy) from a stage file's per-probe
records of its last evaluation (`final_records`: correct_p, correct_a, stat/<statistic>); a
full-fine-tuning run stopped at a task-1 level (--task1-stop-at) gives the control at that level.

Against it, the gate's task-0 accuracy at the control's routed task-1 accuracy: each gated run's
curve along training (result.accuracy) read with reports/frontier.py's cell_at (linear between
the two evaluations that bracket the level, best over crossings; a chord where they are more than
GAP apart), the best over the seed's gated LRs; the difference is gate - control. Per seed, per
control run (its LR and stop level), and over seeds as mean [min, max]; grouped by stop level
(and over the LRs asked for) as per-seed means, then mean [min, max] over seeds.

Stage files are tools/biography_benchmark.py's FOLDER/seed<N>/stages/task1_<method><tag>_lr<LR>.json
(bio/protocol.py, bio/settings.py record); the gate's router is its stage's settings (gate_statistic, gate_tau,
gate_direction), so a gate at another tau is set against controls routed at that tau. Standard
library only (reports/frontier.py).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megatron_scale.reports.frontier import Point, cell_at

GAP = 0.15  # the biography frontier's widest measured bracket (reports/frontier.default_gap of 0.5, 0.8, 0.95)
STAGE = re.compile(r"task1_(?P<method>[^+]+?)(?P<tag>\+[^_]*)?_lr(?P<lr>[^_]+)\.json")


@dataclass(frozen=True)
class Stage:
    """One task-1 stage file."""

    path: Path
    seed: int
    method: str
    tag: str  # the variant's tag ("" or "+gate-STAT-TAU-T-DIRECTION")
    lr: float


def stages(folder: str | Path) -> list[Stage]:
    """Every task-1 stage under FOLDER/seed<N>/stages/, by seed, method and LR."""
    out = []
    for path in sorted(Path(folder).glob("seed*/stages/task1_*.json")):
        m, s = STAGE.fullmatch(path.name), re.fullmatch(r"seed(\d+)", path.parent.parent.name)
        if m and s:
            out.append(Stage(path, int(s[1]), m["method"], m["tag"] or "", float(m["lr"])))
    if not out:
        raise FileNotFoundError(f"{folder}: no seed<N>/stages/task1_*.json (a tools/biography_benchmark.py --out folder)")
    return sorted(out, key=lambda s: (s.seed, s.method, s.tag, s.lr))


def _doc(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a stage file ({type(e).__name__}: {e})") from e


@dataclass(frozen=True)
class Router:
    """The gate's rule: z_p where its `statistic` is at least (above) or at most (below) `tau`."""

    statistic: str
    tau: float
    direction: str = "above"

    @classmethod
    def of_gate(cls, settings: Mapping[str, Any], where: Path) -> Router:
        stat, tau = settings.get("gate_statistic"), settings.get("gate_tau")
        if stat in (None, "none") or tau is None:
            raise ValueError(f"{where}: not a gated stage (no gate_statistic / gate_tau in its settings)")
        return cls(str(stat), float(tau), settings.get("gate_direction") or "above")

    def keeps(self, value: float) -> bool:
        return value >= self.tau if self.direction == "above" else value <= self.tau


def routed_accuracy(records: Mapping[str, Sequence[Any]], router: Router, where: str = "records") -> float:
    """Accuracy of the pair routed per probe: z_p's answer (correct_p) where the router keeps z_p,
    else z_a's (correct_a)."""
    key = f"stat/{router.statistic}"
    missing = [k for k in ("correct_p", "correct_a", key) if k not in records]
    if missing:
        raise ValueError(f"{where}: its final records lack {', '.join(missing)}")
    picks = [p if router.keeps(float(v)) else a
             for p, a, v in zip(records["correct_p"], records["correct_a"], records[key], strict=True)]
    if not picks:
        raise ValueError(f"{where}: no probes")
    return sum(float(c) for c in picks) / len(picks)


@dataclass(frozen=True)
class Control:
    """One fully fine-tuned run routed with the task-0 model."""

    seed: int
    lr: float
    stop_at: float | None  # its --task1-stop-at (None: ran its steps)
    stopped_at: int | None  # the step it stopped at, where it reached the level
    point: Point  # (routed task-1, routed task-0) accuracy


def control(stage: Stage, router: Router) -> Control:
    doc = _doc(stage.path)
    final = doc["result"].get("final_records") or {}
    if "task0" not in final or "task1" not in final:
        raise ValueError(f"{stage.path}: no per-probe final records of task 0 and task 1 (run with --routed-baselines)")
    point = (routed_accuracy(final["task1"], router, f"{stage.path} task1"),
             routed_accuracy(final["task0"], router, f"{stage.path} task0"))
    return Control(stage.seed, stage.lr, doc["settings"].get("task1_stop_at"), doc["result"].get("stopped_at"), point)


def gate_curves(found: Iterable[Stage], tag: str,
                gate_lrs: Sequence[float] | None = None) -> tuple[dict[int, dict[float, list[Point]]], Router]:
    """The gated runs of one variant (`tag`) per seed and LR (`gate_lrs`, default all): (task-1,
    task-0) along training, and the gate's router."""
    curves: dict[int, dict[float, list[Point]]] = {}
    router: Router | None = None
    for s in found:
        if s.tag != tag or (gate_lrs is not None and not any(math.isclose(s.lr, x) for x in gate_lrs)):
            continue
        doc = _doc(s.path)
        mine = Router.of_gate(doc["settings"], s.path)
        if router is not None and mine != router:
            raise ValueError(f"{s.path}: gate {mine}, another run of the tag {tag} has {router}")
        router = mine
        acc = doc["result"]["accuracy"]
        curves.setdefault(s.seed, {})[s.lr] = list(zip(acc["task1"], acc["task0"], strict=True))
    if router is None:
        raise ValueError(f"no gated stage {tag!r}")
    return curves, router


@dataclass(frozen=True)
class Match:
    """The gate at a control's routed task-1 level, and the difference."""

    control: Control
    gate: float | None  # its best task-0 accuracy at the level over the seed's gated LRs (None: no curve reaches it)
    gate_lr: float | None
    measured: bool  # False: the gate's value is a chord wider than GAP

    @property
    def diff(self) -> float | None:
        return None if self.gate is None else self.gate - self.control.point[1]


def matches(controls: Sequence[Control], curves: Mapping[int, Mapping[float, list[Point]]]) -> list[Match]:
    out = []
    for c in controls:
        cells = [(cell, lr) for lr, curve in (curves.get(c.seed) or {}).items()
                 if (cell := cell_at(curve, c.point[0], GAP)) is not None]
        if not cells:
            out.append(Match(c, None, None, False))
            continue
        cell, lr = max(cells, key=lambda x: (x[0].value, x[0].measured))
        out.append(Match(c, cell.value, lr, cell.measured))
    return out


def spread(values: Sequence[float]) -> dict[str, float]:
    """{mean, min, max, n} (NaN mean where there is no value)."""
    if not values:
        return {"mean": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def _signed(s: Mapping[str, float]) -> str:
    if not s["n"]:
        return "n.r."
    return f"{s['mean']:+.3f}" if s["n"] == 1 else f"{s['mean']:+.3f} [{s['min']:+.3f}, {s['max']:+.3f}]"


def stop_name(stop: float | str | None) -> str:
    if stop == "all":
        return "every control"
    return "ran its steps" if stop is None else f"stopped at task 1 >= {stop:g}"


def summarise(found: Sequence[Match], lrs: Sequence[float] | None = None) -> dict[str, Any]:
    """Per (stop level, LR): each seed's difference and their spread; per stop level, over the LRs
    (`lrs`, default all): each seed's mean difference and the spread of those over seeds."""
    use = [m for m in found if m.diff is not None and (lrs is None or any(math.isclose(m.control.lr, x) for x in lrs))]
    rows, levels = {}, {}

    def level(at: list[Match], stop: float | None | str) -> dict[str, Any]:
        per_seed = {s: statistics.fmean([m.diff for m in at if m.control.seed == s])  # type: ignore[misc]  # m.diff is not None in `use` (filtered above)
                    for s in sorted({m.control.seed for m in at})}
        return {"stop_at": stop, "lrs": sorted({m.control.lr for m in at}), "by_seed": per_seed,
                **spread(list(per_seed.values())), "single_points": spread([m.diff for m in at])}  # type: ignore[misc]  # m.diff is not None in `use` (filtered above)

    stops = sorted({m.control.stop_at for m in use}, key=lambda s: (s is None, s or 0))
    for stop in stops:
        at = [m for m in use if m.control.stop_at == stop]
        for lr in sorted({m.control.lr for m in at}):
            diffs = {m.control.seed: m.diff for m in at if m.control.lr == lr}
            rows[f"{stop}/{lr:g}"] = {"stop_at": stop, "lr": lr, "by_seed": diffs, **spread(list(diffs.values()))}
        levels[str(stop)] = level(at, stop)
    if len(stops) > 1:  # every control point together (what a single figure over all LRs averages)
        levels["all"] = level(use, "all")
    return {"rows": rows, "levels": levels}


def table(found: Sequence[Match], router: Router, tag: str, lrs: Sequence[float] | None = None) -> str:
    """Markdown: every control point against the gate, then the summary."""
    rule = f"z_p where {router.statistic} {'>=' if router.direction == 'above' else '<='} {router.tau:g}"
    lines = [f"Gate `{tag}` against the routed control (the task-0 model and full fine-tuning, {rule}), at the "
             "control's routed task-1 accuracy\n",
             "| seed | full-FT LR | stop | stopped at step | control task 1 | control task 0 | gate task 0 (LR) "
             "| gate - control |", "|---|---|---|---|---|---|---|---|"]
    for m in found:
        c = m.control
        gate = "not reached" if m.gate is None else f"{'' if m.measured else '~'}{m.gate:.3f} ({m.gate_lr:g})"
        diff = "" if m.diff is None else f"{m.diff:+.3f}"
        lines.append(f"| {c.seed} | {c.lr:g} | {c.stop_at if c.stop_at is not None else '-'} | "
                     f"{c.stopped_at if c.stopped_at is not None else '-'} | {c.point[0]:.3f} | {c.point[1]:.3f} | {gate} "
                     f"| {diff} |")
    s = summarise(found, lrs)
    seeds = sorted({m.control.seed for m in found})
    lines += ["", "Per control LR and stop level: gate - control per seed, and mean [min, max] over seeds\n",
              "| stop | full-FT LR | " + " | ".join(f"seed {x}" for x in seeds) + " | mean [min, max] |",
              "|---|---|" + "---|" * len(seeds) + "---|"]
    for r in s["rows"].values():
        cells = " | ".join(f"{r['by_seed'][x]:+.3f}" if x in r["by_seed"] else "" for x in seeds)
        lines.append(f"| {stop_name(r['stop_at'])} | {r['lr']:g} | {cells} | {_signed(r)} |")
    lines += ["", "Per stop level, over its LRs: each seed's mean gate - control, then mean [min, max] over seeds\n",
              _levels_table(s, seeds)]
    missed = [m.control for m in found if m.gate is None]
    if missed:
        lines.append("\nNot reached by any gated curve of the seed: " + ", ".join(
            f"seed {c.seed} lr {c.lr:g} ({stop_name(c.stop_at)}, task 1 {c.point[0]:.3f})" for c in missed))
    if any(not m.measured for m in found if m.gate is not None):
        lines.append(f"\n~: the gate's value is a chord (its bracketing evaluations more than {GAP:g} apart in task 1).")
    return "\n".join(lines) + "\n"


def _levels_table(s: Mapping[str, Any], seeds: Sequence[int]) -> str:
    lines = ["| stop | LRs | " + " | ".join(f"seed {x}" for x in seeds) + " | mean [min, max] | single points |",
             "|---|---|" + "---|" * len(seeds) + "---|---|"]
    for r in s["levels"].values():
        cells = " | ".join(f"{r['by_seed'][x]:+.4f}" if x in r["by_seed"] else "" for x in seeds)
        sp = r["single_points"]
        lines.append(f"| {stop_name(r['stop_at'])} | {', '.join(f'{x:g}' for x in r['lrs'])} | {cells} | {_signed(r)} "
                     f"| {sp['min']:+.3f} to {sp['max']:+.3f} ({sp['n']}) |")
    return "\n".join(lines) + "\n"


def routed_control(gate_folder: str | Path, control_folders: Sequence[str | Path] = (), *, method: str = "full",
                   lrs: Sequence[float] | None = None, tags: Sequence[str] | None = None,
                   good_lrs: Sequence[float] = (), gate_lrs: Sequence[float] | None = None) -> dict[str, Any]:
    """For each gate variant in `gate_folder` (or `tags`): every `method` stage of `control_folders`
    (default: the gate's folder) at `lrs` (default all) routed by that gate's rule, set against the
    gate (its best over the seed's gated runs at `gate_lrs`, default all); `good_lrs` adds the
    summary over those LRs alone (full fine-tuning's good LRs, say).
    Returns {tag: {"router", "matches", "summary", ["summary_at",] "markdown"}}."""
    found = stages(gate_folder)
    gated = sorted({s.tag for s in found if s.tag.startswith("+gate-")}) if tags is None else list(tags)
    if not gated:
        raise ValueError(f"{gate_folder}: no gated stage (task1_<method>+gate-..._lr*.json)")
    pool = [s for f in (control_folders or [gate_folder]) for s in stages(f) if s.method == method and not s.tag]
    if lrs is not None:
        pool = [s for s in pool if any(math.isclose(s.lr, x) for x in lrs)]
    if not pool:
        raise ValueError(f"no task1_{method}_lr*.json stage in {', '.join(map(str, control_folders or [gate_folder]))}"
                         + (f" at the LRs {list(lrs)}" if lrs is not None else ""))
    out = {}
    for tag in gated:
        curves, router = gate_curves(found, tag, gate_lrs)
        points = [control(s, router) for s in pool]
        seen: dict[tuple, Path] = {}
        for c, s in zip(points, pool, strict=True):
            if (key := (c.seed, c.lr, c.stop_at)) in seen:
                raise ValueError(f"{s.path} and {seen[key]}: the same control (seed {c.seed}, LR {c.lr:g}, "
                                 f"{stop_name(c.stop_at)}) twice")
            seen[key] = s.path
        found_matches = matches(points, curves)
        out[tag] = {"router": vars(router), "matches": [{**vars(m.control), "gate": m.gate, "gate_lr": m.gate_lr,
                                                         "measured": m.measured, "diff": m.diff} for m in found_matches],
                    "summary": summarise(found_matches), "markdown": table(found_matches, router, tag)}
        if good_lrs:
            out[tag]["summary_at"] = {"lrs": list(good_lrs), **summarise(found_matches, good_lrs)}
            out[tag]["markdown"] += f"\nAt the LRs {', '.join(f'{x:g}' for x in good_lrs)} only:\n\n" + \
                _levels_table(summarise(found_matches, good_lrs), sorted({m.control.seed for m in found_matches}))
    return out

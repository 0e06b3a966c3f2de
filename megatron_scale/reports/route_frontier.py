"""SCALE-Route's rows of the real model's frontier, from SCALE-Preserve's own checkpoints.

Route trains bitwise like Preserve (its router acts only in evaluation: tests/training/
test_train_entry.py), so a Preserve checkpoint at iteration i is Route's at i, and Route needs no
training of its own. tools/route_records.py stores each checkpoint's per-token records on the
held-out sets (route_eval/stored.py: both heads' losses, every router statistic, the global-alpha
mixtures, the labels) and on held-out calibration windows ("cal/<set>", disjoint from the
evaluated ones). From them, per checkpoint, every row below is computed with no model:

    scale-route[paper: cosine>=0.5, token]   the paper's router: z_p where cos(z_p, z_a) >= 0.5, per token
    scale-route[paper's direction: ...]      the same statistic, direction and unit at every tau (in-sample)
    scale-route[deployable: STAT, UNIT]      tau and direction calibrated on the held-out windows
                                             (at least KEEP_OLD of the calibration English tokens on
                                             z_p), then applied to the evaluated windows
    scale-route[oracle tau: STAT, UNIT]      every tau (direction as calibrated), read off the evaluated
                                             windows: an in-sample envelope, not a deployable router
    scale-route[script oracle: ..., char]    a Hangul character to z_a, every other to z_p, knowing the
                                             predicted character: the upper bound of a script router
    scale-route[script: the previous ...]    the same by the character before it: causal, no calibration
                                             (both with a tokenizer: route_eval/script.py)
    control[random mixing]                   each token takes z_a with probability f (expected loss)
    control[global alpha]                    z_p + alpha (z_a - z_p) for every token

The paper's and the deployable routers give one point per checkpoint, so their curves run along
training (from (0, 1) at iteration 0, where W_out_up = 0 makes z_a = z_p); the oracle and the
controls give a curve per checkpoint over their knob, and the frontier takes the best over the
checkpoints. UNIT: token (the paper's), or char (every token of one UTF-8 character takes its first
token's decision, the model's own rule: route_eval/units.py). Scores as reports/recipe_frontier.py's, with
z_p (exactly the base model) on the same windows as the base.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from megatron_scale import method_catalog as catalog
from megatron_scale.reports.frontier import Point, Run
from megatron_scale.reports.recipe_frontier import Axis, Spec, losses_of, parts, point

ROUTE = "scale-route"
KEEP_OLD = 0.95
PAPER = f"{ROUTE}[paper: cosine>=0.5, token]"
PAPER_SWEPT = f"{ROUTE}[paper's direction: cosine>=tau, token, every tau]"
RANDOM, ALPHA = "control[random mixing]", "control[global alpha]"
SCRIPT_ORACLE = f"{ROUTE}[script oracle: the predicted character's script, char]"  # an upper bound
SCRIPT_PREVIOUS = f"{ROUTE}[script: the previous character's, char]"  # causal, no calibration
RECORDS = "route_records"  # a run's folder of records files, iter_NNNNNNN.safetensors


def records_files(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(iteration, file) of every records file of a run, by iteration."""
    found = []
    for f in sorted((Path(run_dir) / RECORDS).glob("iter_*.safetensors")):
        m = re.fullmatch(r"iter_(\d+)\.safetensors", f.name)
        if m:
            found.append((int(m[1]), f))
    return found


def deployable(stat: str, unit: str) -> str:
    return f"{ROUTE}[deployable: {stat}, {unit}]"


def oracle(stat: str, unit: str) -> str:
    return f"{ROUTE}[oracle tau: {stat}, {unit}]"


def _scored(ppl: Mapping[str, float], base: Mapping[str, float], axis: Axis) -> Point:
    return point({s: math.log(ppl[s]) for s in axis.sets}, base, axis)


def _parts(ppl: Mapping[str, float], base: Mapping[str, float], axis: Axis) -> tuple[float, ...]:
    return parts({s: math.log(ppl[s]) for s in axis.sets}, base, axis)


def _run(name: str, lr: float, seed: int, scored: Sequence[tuple[Point, tuple[float, ...]]], axis: Axis) -> Run:
    """A Route row's curve from its (point, per-set retentions) pairs; parts only with several old sets."""
    return Run(name, lr, seed, tuple(p for p, _ in scored), tuple(q for _, q in scored) if len(axis.old) > 1 else ())


def checkpoint_rows(records: Mapping[str, Mapping[str, Any]], meta: Mapping[str, Any], axis: Axis, *,
                    units: Sequence[str] = ("token", "char"), calibrate_on: tuple[str, str] | None = None,
                    keep_old: float = KEEP_OLD) -> dict[str, Any]:
    """One checkpoint's rows: {"points": {name: Point} (paper's, deployable), "curves": {name: [Point]}
    (oracle, controls), "parts" and "curve_parts" (the same, each old set's retention), "detail": JSON-able (heads, and per statistic and unit its direction, tau,
    calibration shares and oracle sweep: the sweep's output with unit and direction)}."""
    import torch

    from megatron_scale.route_eval.calibrate import calibrate
    from megatron_scale.route_eval.controls import alpha_sweep, random_sweep
    from megatron_scale.route_eval.curves import default_grid, head_metric, roc, stat_key, sweep
    from megatron_scale.data.tokenizer import token_bytes
    from megatron_scale.route_eval.units import pooled_records
    from megatron_scale.route_stats.statistics import STATISTICS

    cal_old, cal_new = calibrate_on or (axis.old[0], axis.new)
    names = list(dict.fromkeys([*axis.sets, cal_old, f"cal/{cal_old}", f"cal/{cal_new}"]))
    missing = [s for s in names if s not in records]
    if missing:
        raise ValueError(f"route records of {meta.get('load')}: no set {missing} (it holds {sorted(records)})")
    evaluated = {s: records[s] for s in axis.sets}
    base = {s: float(r["loss_p"].double().mean()) for s, r in evaluated.items()}
    seq = int(meta["seq_length"])
    pp: dict[str, Mapping[str, float]] = {}  # per row, its perplexity per set (points, then curves)
    cp: dict[str, list[Mapping[str, float]]] = {}
    detail: dict[str, Any] = {"heads": {s: {"z_p": head_metric(r, "p", "ppl"), "z_a": head_metric(r, "a", "ppl")}
                                        for s, r in evaluated.items()},
                              "losses": {s: {"z_p": base[s], "z_a": float(r["loss_a"].double().mean())}
                                         for s, r in evaluated.items()}, "routers": []}
    paper = sweep(evaluated, "cosine", [0.5], "ppl", "above")[0]
    pp[PAPER] = paper
    pieces = None
    for unit in units:
        if unit != "token" and pieces is None:
            if not meta.get("tokenizer"):
                raise ValueError(f"route records of {meta.get('load')}: deciding per {unit} needs the tokenizer "
                                 "(tools/route_records.py --tokenizer)")
            pieces = token_bytes(meta["tokenizer"])
        pooled = {s: pooled_records(dict(records[s]), records[s]["labels"].view(-1, seq), pieces or [], unit, "first")
                  for s in names}
        ev = {s: pooled[s] for s in axis.sets}
        for stat in STATISTICS:
            key = stat_key(stat)
            cal = calibrate(pooled[f"cal/{cal_old}"][key], pooled[f"cal/{cal_new}"][key], stat, keep_old)
            at = sweep(ev, stat, [cal.tau], "ppl", cal.direction)[0]
            pp[deployable(stat, unit)] = at
            grid = default_grid([torch.cat([ev[s][key] for s in axis.sets])])
            swept = sweep(ev, stat, grid, "ppl", cal.direction)
            cp[oracle(stat, unit)] = list(swept)
            if (stat, unit) == ("cosine", "token"):
                cp[PAPER_SWEPT] = list(sweep(ev, stat, grid, "ppl", "above"))
            detail["routers"].append({
                "statistic": stat, "unit": unit, "pool": "first" if unit != "token" else None,
                "direction": cal.direction, "tau": cal.tau, "keep_old_target": keep_old,
                "calibrated_on": [f"cal/{cal_old}", f"cal/{cal_new}"],
                "calibration_old_kept": cal.old_kept, "calibration_new_to_z_a": cal.new_adapted,
                "auc_in_direction": roc(pooled[cal_old][key], pooled[axis.new][key], cal.direction)["auc"],
                "deployable": at, "sweep": swept})
    if pieces is not None:  # the script routers (route_eval/script.py): per character, no statistic
        from megatron_scale.route_eval import script

        scripted = {s: script.with_script_statistics(dict(evaluated[s]), pieces, seq) for s in axis.sets}
        detail["script"] = []
        for name, key in ((SCRIPT_ORACLE, script.ORACLE), (SCRIPT_PREVIOUS, script.PREVIOUS)):
            at = sweep(scripted, key.removeprefix("stat/"), [script.TAU], "ppl", script.DIRECTION)[0]
            pp[name] = at
            detail["script"].append({"router": name, **at})
    cp[RANDOM] = list(random_sweep(evaluated, metric="ppl"))
    cp[ALPHA] = list(alpha_sweep(evaluated, metric="ppl"))
    detail["paper"] = paper
    return {"points": {n: _scored(v, base, axis) for n, v in pp.items()},
            "curves": {n: [_scored(v, base, axis) for v in c] for n, c in cp.items()},
            "parts": {n: _parts(v, base, axis) for n, v in pp.items()},
            "curve_parts": {n: [_parts(v, base, axis) for v in c] for n, c in cp.items()}, "detail": detail}


def records_losses(run_dir: str | Path) -> list[dict[str, Any]]:
    """Per records file of a run: {"iteration", "file", "losses": {set: {"z_p", "z_a"}}}, the mean loss
    (nats per token) of each head on each evaluated set (records without calibration sets or
    alpha mixtures do: the Preserve curve needs only these)."""
    from megatron_scale.route_eval import stored

    out = []
    for it, f in records_files(run_dir):
        records, _ = stored.load(f)
        out.append({"iteration": it, "file": str(f), "losses": {
            s: {"z_p": float(r["loss_p"].double().mean()), "z_a": float(r["loss_a"].double().mean())}
            for s, r in records.items() if not s.startswith("cal/")}})
    return out


def route_runs(run_dir: str | Path, lr: float, seed: int, axis: Axis, **kw: Any) -> tuple[list[Run], list[dict]]:
    """The frontier's Route rows of one SCALE-Preserve run (its records files), and per checkpoint
    its detail (iteration first). Checkpoints whose records hold no calibration windows (recorded
    for the Preserve curve alone: `tools/route_records.py` without --calibration) give no Route
    point; a run none of whose records hold them is one error."""
    from megatron_scale.route_eval import stored

    files = records_files(run_dir)
    if not files:
        raise FileNotFoundError(f"{run_dir}: no {RECORDS}/iter_*.safetensors (tools/route_records.py)")
    along: dict[str, list[tuple[Point, tuple[float, ...]]]] = {}
    runs: list[Run] = []
    details = []
    routable = 0
    for it, f in files:
        records, meta = stored.load(f)
        if not any(name.startswith("cal/") for name in records):
            continue
        routable += 1
        rows = checkpoint_rows(records, meta, axis, **kw)
        for name, p in rows["points"].items():  # iteration 0: z_a = z_p exactly
            along.setdefault(name, [((0.0, 1.0), (1.0,) * len(axis.old))]).append((p, rows["parts"][name]))
        runs += [_run(name, lr, seed, list(zip(c, rows["curve_parts"][name], strict=True)), axis)
                 for name, c in rows["curves"].items()]
        details.append({"iteration": it, "file": str(f), **rows["detail"]})
    if not routable:
        raise ValueError(f"{run_dir}: no route records with calibration windows (cal/<set>): "
                         "tools/route_records.py --calibration, or leave this LR out of --route-lrs")
    runs += [_run(name, lr, seed, c, axis) for name, c in along.items()]
    return runs, details


TOLERANCE = 1e-4  # relative: the same windows scored by training's evaluation and by the records


def preserve_curve(losses: Mapping[int, Mapping[str, float]], details: Sequence[Mapping[str, Any]], axis: Axis,
                   where: str) -> tuple[tuple[Point, ...], tuple[tuple[float, ...], ...]]:
    """SCALE-Preserve's curve along training: its own evaluations (`losses`, nats by iteration and
    set, iteration 0 the base's) and, at the iterations it did not evaluate, its records' z_a (the
    model's output), scored against the same base. Records score the run's own evaluation windows
    (tools/route_records.py), so z_p there is the base's evaluation and z_a the run's at equal
    iterations: both are checked, to TOLERANCE, and a mismatch is one error naming the file. Returns
    the curve and each point's per-set retentions (() with one old set)."""
    base = losses[0]
    points = {it: dict(v) for it, v in losses.items()}
    for d in details:
        got = d["losses"]
        for s in axis.sets:
            pairs = [("z_p", base[s], "its iteration-0 evaluation")]
            if d["iteration"] in losses:
                pairs.append(("z_a", losses[d["iteration"]][s], f"its evaluation at iteration {d['iteration']}"))
            for head, want, what in pairs:
                if abs(got[s][head] - want) > TOLERANCE * abs(want):
                    raise ValueError(f"{where}: the route records {d['file']} give {s}'s {head} loss {got[s][head]:.6f}, "
                                     f"{what} {want:.6f}: they score other windows than the run evaluated "
                                     "(tools/route_records.py --samples and --eval-seed must be the run's)")
        points.setdefault(d["iteration"], {s: got[s]["z_a"] for s in axis.sets})
    order = sorted(points)
    return (tuple(point(points[it], base, axis) for it in order),
            tuple(parts(points[it], base, axis) for it in order) if len(axis.old) > 1 else ())


def route_rows(specs: list[Spec], axis: Axis, lrs: list[float] | None, units: list[str],
               calibrate_on: tuple[str, str], base: str | None = None) -> tuple[list[Run], list[dict], dict[tuple, tuple]]:
    """Route's rows from every SCALE-Preserve run with route records (tools/route_records.py) at
    one of `lrs` (None: any), each router calibrated on the held-out windows of `calibrate_on`
    (old, new) whatever the axis: one router, scored on every axis. Also each such Preserve run's
    curve with its records' z_a where it did not evaluate, by (name, LR, seed)."""
    runs, detail, curves = [], [], {}
    for s in specs:
        if catalog.method(s.method).variant == "preserve" and records_files(s.run_dir):
            seed = s.trained_seed()
            curves[(s.name, s.lr, seed)] = preserve_curve(losses_of(s.metrics, axis, base), records_losses(s.run_dir),
                                                          axis, str(s.run_dir))
            if lrs is None or s.lr in lrs:
                got, d = route_runs(s.run_dir, s.lr, seed, axis, units=tuple(units), calibrate_on=calibrate_on)
                runs += got
                detail.append({"run": str(s.run_dir), "lr": s.lr, "seed": seed, "checkpoints": d})
    return runs, detail, curves

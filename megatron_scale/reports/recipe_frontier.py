"""The real model's frontier: English retention against Korean learning, along training, from the
recipe's own runs (examples/scale_korean.sh), every method at one or more learning rates and seeds.

The two scores of one evaluation, both higher-is-better and 0 / 1 at the base:
    learning  = 1 - loss_new / loss_new(base)              the share of the base's bits per byte gone
    retention = mean over the old sets s of loss_s(base) / loss_s
                                                           1 where untouched, below 1 where forgotten
Bits per byte is the evaluation's loss times a constant of its set (tokens per byte / ln 2), and
every evaluation of a run scores the same windows (training/loop.py's evaluate), so both ratios
are ratios of bits per byte, exact without the set's byte count. The base is each run's own
iteration-0 evaluation, which every method shares on the same windows (runs of every seed too,
with the recipe's SEED: training's --eval-seed keeps the windows). Retention over several old sets
(English: Shakespeare, modern prose, passages) is the mean of each set's ratio; an `Axis` names
the new set and the old ones.

SCALE-Route trains with its router as configured (its training evaluations are routed that way);
its frontier is the router sweep of the trained model (tools/route_sweep.py, the recipe's
ROUTE_SWEEP=1): every tau of every statistic, on the sweep's own windows, where the base is the
preservation head z_p (exactly the base model's output). One curve per statistic, named
"scale-route[<statistic>]", in the direction the sweep calibrated (`sweep_extras` records it, with
the routing unit). `sweep_extras` adds what the sweep also tells (issue 44): the paper's own
router where the calibrated cosine is reversed ("[cosine, paper's]", z_p where cos >= tau), the
controls without a router ("[random mix]": every token on z_a with probability f, from the two
heads' mean losses, exact; "[alpha mix]": z_p + alpha (z_a - z_p), where the sweep scored it),
and the deployable point of each statistic whose tau was calibrated on held-out windows. Route
from SCALE-Preserve's own checkpoints (the two train bitwise alike) is reports/route_frontier.py.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from megatron_scale import artifacts
from megatron_scale.recipe.layout import run_name
from megatron_scale.reports.frontier import RUN_LEVELS, Point, Run
from megatron_scale.reports.frontier_report import Axes, Marker
from megatron_scale.reports.recipe import _pct
from megatron_scale.reports.route_sweep import load_sweep, read_sweep, swept
from megatron_scale.run_metrics import evaluations, start_record

LEVELS = RUN_LEVELS
SEED = 1234  # training's default --seed: a run whose folder names no seed trained with it


@dataclass(frozen=True)
class Axis:
    """Which evaluation sets make the two scores: learning on `new`, retention the mean over `old`."""

    new: str
    old: tuple[str, ...]

    @classmethod
    def of(cls, old: str | Sequence[str], new: str) -> Axis:
        return cls(new, (old,) if isinstance(old, str) else tuple(old))

    @property
    def old_name(self) -> str:
        return self.old[0] if len(self.old) == 1 else f"mean({', '.join(self.old)})"

    @property
    def sets(self) -> tuple[str, ...]:
        return (self.new, *self.old)


def axes(old: str | Sequence[str], new: str) -> Axes:
    axis = Axis.of(old, new)
    o, n = axis.old_name, axis.new
    return Axes(new=f"{n} learning", old=f"{o} retention", new_name=n, old_name=o,
                new_label=f"{n} learning (share of the base's bits per byte gone, %)",
                old_label=f"{o} retention (base bits per byte / bits per byte, %)", limits=None,
                old_sets=len(axis.old))


@dataclass(frozen=True)
class Spec:
    """One run of the recipe: WORKDIR, the method and the LR it trained at, its seed (the recipe's
    SEED: the run's folder is METHOD-seedSEED; none: METHOD, training's default seed), and the name
    it is drawn under (the method's, unless a variant of it is named apart:
    "[NAME=]WORKDIR:METHOD:LR[:SEED]")."""

    workdir: Path
    method: str
    lr: float
    name: str = ""
    seed: int | None = None

    @classmethod
    def parse(cls, text: str) -> Spec:
        name, eq, rest = text.partition("=")
        if not eq:
            name, rest = "", text
        seed: int | None = None
        head, _, last = rest.rpartition(":")
        if last.isdigit() and head.count(":") >= 2:  # WORKDIR:METHOD:LR:SEED
            rest, seed = head, int(last)
        parts = rest.rsplit(":", 2)
        if len(parts) != 3 or not parts[0] or not parts[1] or (eq and (not name or "[" in name)):
            raise ValueError(f"run {text!r}: expected [NAME=]WORKDIR:METHOD:LR[:SEED], e.g. runs/fr:scale-preserve:1e-3 "
                             "(NAME without '[')")
        try:
            lr = float(parts[2])
        except ValueError:
            raise ValueError(f"run {text!r}: the LR {parts[2]!r} is not a number") from None
        return cls(Path(parts[0]), parts[1], lr, name or parts[1], seed)

    @property
    def run_dir(self) -> Path:
        return self.workdir / "runs" / run_name(self.method, self.seed)

    @property
    def metrics(self) -> Path:
        return artifacts.METRICS.path(self.workdir, method=run_name(self.method, self.seed))

    @property
    def sweep(self) -> Path:
        return artifacts.SWEEP.path(self.workdir, method=run_name(self.method, self.seed))

    def trained_seed(self) -> int:
        """The run's seed: the one its metrics record (the training entry's "start" record), which
        must be the folder's; training's default where neither says."""
        recorded = start_record(self.metrics).get("seed")
        if self.seed is not None and recorded is not None and recorded != self.seed:
            raise ValueError(f"run {self.workdir}:{self.method}: its folder says seed {self.seed}, its metrics "
                             f"{self.metrics} record seed {recorded}")
        return self.seed if self.seed is not None else recorded if recorded is not None else SEED


def scores(loss_old: float, loss_new: float, base_old: float, base_new: float) -> Point:
    """(learning, retention) of one evaluation against the base's, one old set."""
    return 1.0 - loss_new / base_new, base_old / loss_old


def point(losses: Mapping[str, float], base: Mapping[str, float], axis: Axis) -> Point:
    """(learning, retention) of one evaluation's losses (nats per token, by set) against the base's:
    retention is the mean of each old set's ratio."""
    learning = 1.0 - losses[axis.new] / base[axis.new]
    return learning, statistics.fmean(base[s] / losses[s] for s in axis.old)


def parts(losses: Mapping[str, float], base: Mapping[str, float], axis: Axis) -> tuple[float, ...]:
    """Each old set's retention base / loss (point's retention is their mean), in axis.old's order."""
    return tuple(base[s] / losses[s] for s in axis.old)


WINDOWS = ("seq_length", "global_batch_size", "eval_iters", "eval_seed", "eval_data")  # what fixes the evaluated windows


def losses_of(metrics: str | os.PathLike, axis: Axis, base: str | os.PathLike | None = None) -> dict[int, dict[str, float]]:
    """Each evaluation's loss (nats per token) on the axis' sets, by iteration (0 first, the base's).
    A run that did not evaluate at iteration 0 takes the iteration-0 evaluation of `base` (another
    run's metrics, from the same base model), where the two evaluated the same windows: the start
    records must agree on every setting in WINDOWS that both record."""
    evals = evaluations(metrics)
    if 0 not in evals and base is not None:
        mine, theirs = start_record(metrics), start_record(base)
        differ = [k for k in WINDOWS if k in mine and k in theirs and mine[k] != theirs[k]]
        if not mine or not theirs or differ:
            raise ValueError(f"{metrics}: its evaluations and the base's {base} do not score the same windows "
                             f"({'differing: ' + ', '.join(differ) if differ else 'a start record is missing'})")
        shared = evaluations(base)
        if 0 in shared:
            evals = {0: shared[0], **evals}
    if 0 not in evals:
        raise ValueError(f"{metrics}: no iteration-0 evaluation (the base's, which the scores are relative to; "
                         "--base-metrics gives one for runs that skipped it)")
    for it, recs in evals.items():
        missing = [n for n in axis.sets if n not in recs]
        if missing:
            raise ValueError(f"{metrics}: iteration {it} has no evaluation of {', '.join(missing)} "
                             f"(sets evaluated: {', '.join(sorted(recs))})")
    return {it: {n: float(recs[n]["lm_loss"]) for n in axis.sets} for it, recs in sorted(evals.items())}


def training_curve(metrics: str | os.PathLike, old: str | Sequence[str], new: str,
                   base: str | os.PathLike | None = None) -> tuple[Point, ...]:
    """(learning, retention) at every evaluation of one run, the first being its iteration 0
    (`base`'s where the run skipped it: losses_of)."""
    losses = losses_of(metrics, Axis.of(old, new), base)
    return tuple(point(v, losses[0], Axis.of(old, new)) for v in losses.values())


def training_run(name: str, lr: float, seed: int, metrics: str | os.PathLike, old: str | Sequence[str], new: str,
                 base: str | os.PathLike | None = None) -> Run:
    """One run's curve along its evaluations (training_curve) and, with several old sets, each
    evaluation's per-set retentions (the Run's parts, for per-set capping)."""
    axis = Axis.of(old, new)
    losses = losses_of(metrics, axis, base)
    curve = tuple(point(v, losses[0], axis) for v in losses.values())
    return Run(name, lr, seed, curve, tuple(parts(v, losses[0], axis) for v in losses.values())
               if len(axis.old) > 1 else ())


def iterations(metrics: str | os.PathLike) -> list[int]:
    """The iterations a run evaluated at, in order (its curve's points)."""
    return sorted(evaluations(metrics))


def sweep_curves(sweep: str | os.PathLike, method: str, lr: float, old: str, new: str, seed: int = SEED) -> list[Run]:
    """Per statistic of a router sweep of `old` against `new`: (learning, retention) at every tau,
    against z_p."""
    doc = load_sweep(sweep, old, new)
    if doc.get("metric") != "ppl":
        raise ValueError(f"{sweep}: expected a sweep scored in perplexity, got metric {doc.get('metric')!r}")
    base_old, base_new = (math.log(doc["heads"][name]["z_p"]) for name in (old, new))
    return [Run(f"{method}[{stat}]", lr, seed,
                tuple(scores(math.log(p[old]), math.log(p[new]), base_old, base_new) for p in a["points"]))
            for stat, a in sorted(doc["statistics"].items())]


def sweep_extras(sweep: str | os.PathLike, method: str, lr: float, old: str, new: str,
                 rates: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(21))) -> tuple[list[Run], list[Marker], dict]:
    """From one router sweep: the paper's cosine router (where the calibrated one is reversed),
    the random and alpha mixing controls, the deployable markers (held-out calibration), and per
    curve what it is (statistic or control, direction, unit) for frontier.json."""
    doc = load_sweep(sweep, old, new)
    log_p = {name: math.log(doc["heads"][name]["z_p"]) for name in (old, new)}
    log_a = {name: math.log(doc["heads"][name]["z_a"]) for name in (old, new)}

    def point(p: dict) -> tuple[float, float]:
        return scores(math.log(p[old]), math.log(p[new]), log_p[old], log_p[new])

    unit = doc.get("unit", "token")
    runs, markers, info = [], [], {}
    for stat, a in sorted(doc["statistics"].items()):
        name = f"{method}[{stat}]"
        info[name] = {"statistic": stat, "direction": a.get("direction", a["calibration"].get("direction", "above")),
                      "unit": unit, "tau": "every tau, read off the evaluated windows"}
        if "paper_points" in a:
            runs.append(Run(f"{method}[{stat}, paper's]", lr, SEED, tuple(point(p) for p in a["paper_points"])))
            info[f"{method}[{stat}, paper's]"] = {"statistic": stat, "direction": "above", "unit": unit}
        cal = a["calibration"]
        if cal.get("held_out") and old in cal and new in cal:
            markers.append(Marker(f"{method}[{stat}, deployable]", lr, SEED, point(cal), name))
    random = (doc.get("controls") or {}).get("random") or [  # exact from the heads' mean losses
        {old: math.exp((1 - f) * log_p[old] + f * log_a[old]), new: math.exp((1 - f) * log_p[new] + f * log_a[new])}
        for f in rates]
    runs.append(Run(f"{method}[random mix]", lr, SEED, tuple(point(p) for p in random)))
    info[f"{method}[random mix]"] = {"control": "random", "knob": "rate", "unit": unit}
    if (doc.get("controls") or {}).get("alpha"):
        runs.append(Run(f"{method}[alpha mix]", lr, SEED, tuple(point(p) for p in doc["controls"]["alpha"])))
        info[f"{method}[alpha mix]"] = {"control": "alpha", "knob": "alpha", "unit": unit}
    return runs, markers, info


def sweeps(path: Path, old: str, new: str) -> bool:
    """Whether `path` is a router sweep of `old` against `new`: a sweep scores one old set, so on
    another set's axis (the frontier's by_set/ ones) it has nothing to say and is left out."""
    return path.is_file() and swept(read_sweep(path)) == (old, new)


def extras(specs: list[Spec], old: str = "en", new: str = "ko") -> tuple[list[Run], list[Marker], dict]:
    """sweep_extras of every run with a sweep."""
    runs, markers, info = [], [], {}
    for s in specs:
        if sweeps(s.sweep, old, new):
            r, m, i = sweep_extras(s.sweep, s.name, s.lr, old, new)
            runs, markers = runs + r, markers + m
            info.update(i)
    return runs, markers, info


def runs_of(specs: list[Spec], old: str | Sequence[str] = "en", new: str = "ko",
            base: str | os.PathLike | None = None) -> list[Run]:
    """Every curve: one per run along training, and per router statistic of each run with a sweep
    (a sweep scores one old set: with several, the sweep is left out)."""
    out = []
    for s in specs:
        if not s.metrics.is_file():
            raise FileNotFoundError(f"run {s.workdir}:{s.method}:{s.lr:g}: no metrics file {s.metrics} (has it trained?)")
        seed = s.trained_seed()
        out.append(training_run(s.name, s.lr, seed, s.metrics, old, new, base))
        one = old if isinstance(old, str) else old[0] if len(old) == 1 else None
        if one is not None and sweeps(s.sweep, one, new):
            out += sweep_curves(s.sweep, s.name, s.lr, one, new, seed)
    return out


def prior_runs(folder: str | os.PathLike, rel: str, axis: Axis) -> list[Run]:
    """The curves of an earlier frontier (tools/recipe_frontier.py's folder, `rel` the sub-folder
    of this axis: "" or by_set/SET or a further new set's), to stand beside new runs whose recipe
    WORKDIRs the earlier ones no longer have. Its axis must be this one: the same old sets, the same new.
    With several old sets, each curve's per-set retentions are its recorded parts, or else those of
    the earlier frontier's by_set/<set>/ curves of the same run (prior_parts)."""
    path = Path(folder) / rel / "frontier.json"
    if not path.is_file():
        raise FileNotFoundError(f"--prior {folder}: no {path} (an earlier tools/recipe_frontier.py --out folder, "
                                "with the same --old, --new and --also-new)")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if (tuple(doc.get("old", ())), doc.get("new")) != (axis.old, axis.new):
        raise ValueError(f"--prior {path}: its axis is old {doc.get('old')} / new {doc.get('new')}, "
                         f"not old {list(axis.old)} / new {axis.new}")
    runs = [Run(r["method"], float(r["lr"]), int(r["seed"]), tuple((float(a), float(b)) for a, b in r["curve"]),
                tuple(tuple(float(v) for v in p) for p in r.get("parts", ())))
            for r in doc["runs"]]
    if len(axis.old) > 1 and not all(r.parts for r in runs):
        by_set = _by_set_curves(folder, axis)
        runs = [r if r.parts else Run(r.method, r.lr, r.seed, r.curve, prior_parts(by_set, r)) for r in runs]
    return runs


def _by_set_curves(folder: str | os.PathLike, axis: Axis) -> dict[tuple, list[list[float]]] | None:
    """Per (method, LR, seed) of an earlier frontier's by_set/<set>/frontier.json, each old set's
    retention along the curve (None where a set's folder is missing)."""
    got: dict[tuple, list[list[float]]] = {}
    for i, s in enumerate(axis.old):
        path = Path(folder) / "by_set" / s / "frontier.json"
        if not path.is_file():
            return None
        for r in json.loads(path.read_text(encoding="utf-8"))["runs"]:
            key = (r["method"], float(r["lr"]), int(r["seed"]))
            if len(got.setdefault(key, [])) == i:  # a run named twice in one set's file is left to fail the check
                got[key].append([float(b) for _, b in r["curve"]])
    return {k: v for k, v in got.items() if len(v) == len(axis.old)}


def prior_parts(by_set: dict[tuple, list[list[float]]] | None, run: Run) -> tuple[tuple[float, ...], ...]:
    """A prior run's per-set retentions from its earlier frontier's by_set/ curves (_by_set_curves),
    where they line up with its curve: as many points, and their mean each point's retention (to
    1e-9); () where they are missing or do not."""
    sets = (by_set or {}).get((run.method, run.lr, run.seed))
    if not sets or any(len(c) != len(run.curve) for c in sets):
        return ()
    got = tuple(zip(*sets, strict=True))
    if any(abs(statistics.fmean(p) - old) > 1e-9 for p, (_, old) in zip(got, run.curve, strict=True)):
        return ()
    return got


def final_table(specs: list[Spec], sets: tuple[str, ...], base: str | os.PathLike | None = None) -> str:
    """Markdown: every run's last evaluation, each set's bits-per-byte change against the base
    (loss ratio - 1, the same windows; `base`'s iteration 0 for a run that skipped its own, as
    losses_of checks), to show the English sets the frontier does not draw."""
    seeded = any(s.seed is not None for s in specs)
    lines = ["| method | LR |" + (" seed |" if seeded else "") + " iteration | " + " | ".join(f"{s} change" for s in sets) + " |",
             "|---|---|" + ("---|" if seeded else "") + "---|" + "---|" * len(sets)]
    for s in specs:
        evals = evaluations(s.metrics)
        if 0 not in evals:
            losses_of(s.metrics, Axis.of((), sets[0]), base)  # the check, or the error
            evals = {0: evaluations(base)[0], **evals}
        last = max(evals)
        cells = [_pct(float(evals[last][n]["lm_loss"]), float(evals[0][n]["lm_loss"]))
                 if n in evals[last] and n in evals[0] else "" for n in sets]
        seed = f" {s.trained_seed()} |" if seeded else ""
        lines.append(f"| {s.name} | {s.lr:g} |{seed} {last} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

"""The real model's frontier: English retention against Korean learning, along training, from the
recipe's own runs (examples/scale_korean.sh), every method at one or more learning rates.

The two scores of one evaluation, both higher-is-better and 0 / 1 at the base:
    learning  = 1 - loss_new / loss_new(base)    the share of the base's Korean bits per byte gone
    retention = loss_old(base) / loss_old        1 where English is untouched, below 1 where forgotten
Bits per byte is the evaluation's loss times a constant of its set (tokens per byte / ln 2), and
every evaluation of a run scores the same windows (training/loop.py's evaluate), so both ratios
are ratios of bits per byte, exact without the set's byte count. The base is each run's own
iteration-0 evaluation, which every method shares on the same windows.

SCALE-Route trains with its router as configured (its training evaluations are routed that way);
its frontier is the router sweep of the trained model (tools/route_sweep.py, the recipe's
ROUTE_SWEEP=1): every tau of every statistic, on the sweep's own windows, where the base is the
preservation head z_p (exactly the base model's output). One curve per statistic, named
"scale-route[<statistic>]", in the direction the sweep calibrated (`sweep_extras` records it, with
the routing unit). `sweep_extras` adds what the sweep also tells (issue 44): the paper's own
router where the calibrated cosine is reversed ("[cosine, paper's]", z_p where cos >= tau), the
controls without a router ("[random mix]": every token on z_a with probability f, from the two
heads' mean losses, exact; "[alpha mix]": z_p + alpha (z_a - z_p), where the sweep scored it),
and the deployable point of each statistic whose tau was calibrated on held-out windows.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from megatron_scale.evaluation.frontier import Run
from megatron_scale.evaluation.frontier_report import Axes, Marker
from megatron_scale.recipe.report import _pct, evaluations
from megatron_scale.recipe.route_report import load_sweep

LEVELS = (0.05, 0.1, 0.2)
SEED = 0  # one training run per method and LR: the recipe's data order and init are fixed


def axes(old: str, new: str) -> Axes:
    return Axes(new=f"{new} learning", old=f"{old} retention", new_name=f"{new}", old_name=f"{old}",
                new_label=f"{new} learning (share of the base's bits per byte gone, %)",
                old_label=f"{old} retention (base bits per byte / bits per byte, %)", limits=None)


@dataclass(frozen=True)
class Spec:
    """One run of the recipe: WORKDIR, the method and the LR it trained at, and the name it is
    drawn under (the method's, unless a variant of it is named apart: "[NAME=]WORKDIR:METHOD:LR")."""

    workdir: Path
    method: str
    lr: float
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> Spec:
        name, eq, rest = text.partition("=")
        if not eq:
            name, rest = "", text
        parts = rest.rsplit(":", 2)
        if len(parts) != 3 or not parts[0] or not parts[1] or (eq and (not name or "[" in name)):
            raise ValueError(f"run {text!r}: expected [NAME=]WORKDIR:METHOD:LR, e.g. runs/fr:scale-preserve:1e-3 "
                             "(NAME without '[')")
        try:
            lr = float(parts[2])
        except ValueError:
            raise ValueError(f"run {text!r}: the LR {parts[2]!r} is not a number") from None
        return cls(Path(parts[0]), parts[1], lr, name or parts[1])

    @property
    def metrics(self) -> Path:
        return self.workdir / "runs" / self.method / "metrics.jsonl"

    @property
    def sweep(self) -> Path:
        return self.workdir / "runs" / self.method / "sweep" / "sweep.json"


def scores(loss_old: float, loss_new: float, base_old: float, base_new: float) -> tuple[float, float]:
    """(learning, retention) of one evaluation against the base's."""
    return 1.0 - loss_new / base_new, base_old / loss_old


def training_curve(metrics: str | os.PathLike, old: str, new: str) -> tuple[tuple[float, float], ...]:
    """(learning, retention) at every evaluation of one run, the first being its iteration 0."""
    evals = evaluations(metrics)
    if 0 not in evals:
        raise ValueError(f"{metrics}: no iteration-0 evaluation (the base's, which the scores are relative to)")
    for it, recs in evals.items():
        missing = [n for n in (old, new) if n not in recs]
        if missing:
            raise ValueError(f"{metrics}: iteration {it} has no evaluation of {', '.join(missing)} "
                             f"(sets evaluated: {', '.join(sorted(recs))})")
    base = evals[0]
    return tuple(scores(float(r[old]["lm_loss"]), float(r[new]["lm_loss"]), float(base[old]["lm_loss"]),
                        float(base[new]["lm_loss"])) for _, r in sorted(evals.items()))


def sweep_curves(sweep: str | os.PathLike, method: str, lr: float, old: str, new: str) -> list[Run]:
    """Per statistic of a router sweep of `old` against `new`: (learning, retention) at every tau,
    against z_p."""
    doc = load_sweep(sweep, old, new)
    if doc.get("metric") != "ppl":
        raise ValueError(f"{sweep}: expected a sweep scored in perplexity, got metric {doc.get('metric')!r}")
    base_old, base_new = (math.log(doc["heads"][name]["z_p"]) for name in (old, new))
    return [Run(f"{method}[{stat}]", lr, SEED,
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


def extras(specs: list[Spec], old: str = "en", new: str = "ko") -> tuple[list[Run], list[Marker], dict]:
    """sweep_extras of every run with a sweep."""
    runs, markers, info = [], [], {}
    for s in specs:
        if s.sweep.is_file():
            r, m, i = sweep_extras(s.sweep, s.name, s.lr, old, new)
            runs, markers = runs + r, markers + m
            info.update(i)
    return runs, markers, info


def runs_of(specs: list[Spec], old: str = "en", new: str = "ko") -> list[Run]:
    """Every curve: one per run along training, and per router statistic of each run with a sweep."""
    out = []
    for s in specs:
        if not s.metrics.is_file():
            raise FileNotFoundError(f"run {s.workdir}:{s.method}:{s.lr:g}: no metrics file {s.metrics} (has it trained?)")
        out.append(Run(s.name, s.lr, SEED, training_curve(s.metrics, old, new)))
        if s.sweep.is_file():
            out += sweep_curves(s.sweep, s.name, s.lr, old, new)
    return out


def final_table(specs: list[Spec], sets: tuple[str, ...]) -> str:
    """Markdown: every run's last evaluation, each set's bits-per-byte change against the base
    (loss ratio - 1, the same windows), to show the English sets the frontier does not draw."""
    lines = ["| method | LR | iteration | " + " | ".join(f"{s} change" for s in sets) + " |",
             "|---|---|---|" + "---|" * len(sets)]
    for s in specs:
        evals = evaluations(s.metrics)
        last = max(evals)
        cells = [_pct(float(evals[last][n]["lm_loss"]), float(evals[0][n]["lm_loss"]))
                 if n in evals[last] and n in evals[0] else "" for n in sets]
        lines.append(f"| {s.name} | {s.lr:g} | {last} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

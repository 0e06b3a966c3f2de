"""The biography benchmark's frontier: task-0 retention against task-1 learning, every method at
several task-1 learning rates and seeds (tools/biography_benchmark.py --task1-lrs ... --seeds ...).

Each method-and-LR run is a curve of (task-1 accuracy, task-0 accuracy) along its evaluations.
From the per-probe records of a run's last evaluation (bio/router.py), curves of routers and
their controls, each a method of its own ("[" in the name: a sweep, not a training):

    scale-route[<statistic>, ours]   SCALE-Route's router by that statistic, in the direction
                                     calibrated on the evaluated probes, at every tau
    scale-route[cosine, paper's]     the paper's router: z_p where cos(z_p, z_a) >= tau, every tau
    scale-route[random mix]          each probe on z_a with probability f, at every f (expected)
    scale-route[alpha mix]           z_p + alpha (z_a - z_p) for every probe, at every alpha
    base/<method>[...]               the same between the task-0 model (z_p) and <method>'s
                                     trained model (--routed-baselines): a router that ensembles
                                     a base and a fine-tuned model, with no SCALE width
and per statistic a deployable point (Marker): tau and direction calibrated on the other half of
the people, beside the in-sample sweep of the same run.

The summary (reports/frontier.py): the best task-0 retention each method reaches at task-1
accuracy 0.5, 0.8 and 0.95, interpolated along its curves and marked where a chord, best over LRs
per seed, mean and spread over seeds; seed-paired differences; and the area its frontier dominates.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from megatron_scale import method_catalog as catalog
from megatron_scale.bio.variant import variant_tag
from megatron_scale.reports import frontier_report
from megatron_scale.reports.frontier import Run
from megatron_scale.reports.frontier_report import Axes, Marker

LEVELS = (0.5, 0.8, 0.95)
ROUTE = next(m.name for m in catalog.METHODS if m.routes)  # the name SCALE's router rows go under
BASELINE_STATISTICS = ("max-prob", "certainty")  # z_p's own: read the base alone, as Route's do


def prefix(method: str) -> str:
    """The name a run's router rows go under: SCALE-Route's (a scale-preserve run's records are
    its two heads, which train exactly as Route's: Route's router on that model), or base/<method>."""
    kind = catalog.method(method)
    if kind.variant == "preserve":
        return ROUTE
    return method if kind.upscaled else f"base/{method}"


def router_runs(method: str, lr: float, seed: int, analysis: Mapping[str, Any],
                tag: str = "") -> tuple[list[Run], list[Marker], dict]:
    """The router and control curves of one run's analysis (bio/router.py), its deployable
    markers, and what each curve is (statistic, direction, unit) for frontier.json; `tag`: the
    run's variant (bio/protocol.py variant_tag), after the prefix."""
    p = prefix(method) + tag
    runs, markers, info = [], [], {}
    stats = analysis.get("statistics") or {}
    upscaled = catalog.method(method).upscaled
    wanted = stats if upscaled else {s: stats[s] for s in BASELINE_STATISTICS if s in stats}
    unit = analysis.get("unit", "one decision per probe, at the answer's first token")
    for stat, a in wanted.items():
        name = f"{p}[{stat}, ours]"
        runs.append(Run(name, lr, seed, tuple((q["task1"], q["task0"]) for q in a["points"])))
        info[name] = {"statistic": stat, "direction": a.get("direction", "above"), "unit": unit,
                      "tau": "every tau; direction calibrated on the evaluated probes"}
        dep = (analysis.get("deployable") or {}).get(stat)
        if dep:
            markers.append(Marker(f"{p}[{stat}, deployable]", lr, seed, (dep["task1"], dep["task0"]), name))
    if "paper" in analysis and upscaled:
        name = f"{p}[cosine, paper's]"
        runs.append(Run(name, lr, seed, tuple((q["task1"], q["task0"]) for q in analysis["paper"]["points"])))
        info[name] = {"statistic": "cosine", "direction": "above", "unit": unit, "tau": "every tau (the paper's router)"}
        at = analysis["paper"].get("at_tau")
        if at:  # the paper's router at the paper's own tau: deployable as it stands
            markers.append(Marker(f"{p}[cosine, paper's, tau {at['tau']:g}]", lr, seed, (at["task1"], at["task0"]), name))
    for control, knob in (("random", "rate"), ("alpha", "alpha")):
        points = (analysis.get("controls") or {}).get(control)
        if points:
            name = f"{p}[{control} mix]"
            runs.append(Run(name, lr, seed, tuple((q["task1"], q["task0"]) for q in points)))
            info[name] = {"control": control, "knob": knob, "unit": unit}
    return runs, markers, info


def runs_of(results: Mapping[str, Any]) -> tuple[list[Run], list[Marker], dict]:
    """Every curve of one benchmark run (one seed): one per method and LR, and the router and
    control curves of each run with records; the deployable markers; the curves' descriptions
    (per name: statistic or control, unit, and the direction of each seed's run at each LR)."""
    seed, default_lr = results["settings"]["seed"], results["settings"]["task1_lr"]
    out: list[Run] = []
    markers: list[Marker] = []
    info: dict[str, dict] = {}
    for key, r in results["methods"].items():
        method, lr = r.get("method", key), r.get("lr", default_lr)
        tag = variant_tag(results["settings"], method)
        acc = r["accuracy"]
        out.append(Run(method + tag, lr, seed, tuple(zip(acc["task1"], acc["task0"], strict=True))))
        if r.get("router"):
            runs, ms, inf = router_runs(method, lr, seed, r["router"], tag)
            out += runs
            markers += ms
            for name, d in inf.items():
                entry = info.setdefault(name, {k: v for k, v in d.items() if k != "direction"})
                if "direction" in d:
                    entry.setdefault("direction_by_run", {})[f"seed {seed} lr {lr:g}"] = d["direction"]
    return out, markers, info


AXES = Axes(new="task 1", old="task 0", new_name="task-1", old_name="task-0",
            new_label="task 1 learning (first-token accuracy, %)",
            old_label="task 0 retention (first-token accuracy, %)")


def runs_of_stages(out_dir: str) -> tuple[list[Run], dict[str, Any], list[Marker], dict]:
    """The curves of every task-1 stage finished so far under OUT/seed<N>/stages/ (a frontier
    still running, or stopped), the settings of the last, the markers and the curves'
    descriptions; the records are analysed as the benchmark does (bio/router.py)."""
    from megatron_scale.bio import router

    runs: list[Run] = []
    markers: list[Marker] = []
    info: dict[str, dict] = {}
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
        method = m[1].partition("+")[0]  # the file name carries the variant's tag; the settings say it
        one = {"settings": {**settings, "task1_lr": float(m[2])}, "methods": {method: {"method": method, "lr": float(m[2]), **r}}}
        got, ms, inf = runs_of(one)
        runs += got
        markers += ms
        for name, d in inf.items():
            entry = info.setdefault(name, {k: v for k, v in d.items() if k != "direction_by_run"})
            entry.setdefault("direction_by_run", {}).update(d.get("direction_by_run", {}))
    return runs, settings, markers, info


def title(settings: Mapping[str, Any], runs: Sequence[Run]) -> str:
    return (f"synthetic biographies: {settings['task1_people']} task-1 people, LRs {sorted({r.lr for r in runs})}, "
            f"seeds {sorted({r.seed for r in runs})}")


def sections(methods: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The table's row groups: trained methods, SCALE-Route's routers (paper's, then ours), the
    controls without a router, the routed baselines."""
    trained = sorted(m for m in methods if "[" not in m)
    route = [m for m in methods if "[" in m and not m.startswith("base/")]  # a SCALE model's router rows
    paper = sorted(m for m in route if m.endswith("paper's]"))
    ours = sorted(m for m in route if m.endswith(", ours]"))
    mixes = sorted(m for m in route if m.endswith(" mix]"))
    base = sorted(m for m in methods if m.startswith("base/"))
    return [(t, ms) for t, ms in (
        ("Trained methods (each run's own output along training)", trained),
        ("SCALE-Route's routers, every tau of the last evaluation: the paper's (cosine, z_p where cos >= tau) "
         "and ours (direction calibrated on the evaluated probes)", paper + ours),
        ("Controls without a router, from the same records", mixes),
        ("Routed baselines: the task-0 model (z_p) and a trained model, routed by z_p's statistic", base),
    ) if ms]


PAIRS = (
    ("scale-preserve", "full"), ("scale-preserve", "freeze"), ("scale-preserve", "llama-pro"),
    ("scale-preserve", "lora"), ("scale-preserve", "scale-adapt"), ("freeze", "full"),
    ("scale-route[max-prob, ours]", "base/full[max-prob, ours]"),
    ("scale-route[max-prob, ours]", "scale-route[random mix]"), ("scale-route[max-prob, ours]", "scale-route[alpha mix]"),
    ("scale-route[max-prob, ours]", "scale-preserve"),
    ("scale-route[cosine, ours]", "scale-route[cosine, paper's]"),
)


def write_frontier(runs: Sequence[Run], out_dir: str, title: str, levels: Sequence[float] = LEVELS,
                   markers: Sequence[Marker] = (), info: dict | None = None, notes: str = "") -> dict[str, str]:
    """frontier.json (the summary, every curve, the curves' descriptions), frontier.md (the
    tables) and frontier.png."""
    variants = sorted({r.method for r in runs if "+" in r.method and "[" not in r.method})
    pairs = PAIRS + tuple((v, b) for v in variants for b in (v.partition("+")[0], "full", "freeze"))
    return frontier_report.write(runs, out_dir, title, levels, AXES, {"curves": info or {}},
                                 pairs=pairs, markers=markers, sections=sections(sorted({r.method for r in runs})),
                                 notes=notes)

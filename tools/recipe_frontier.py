"""The real model's stability-plasticity frontier from finished recipe runs (megatron_scale/recipe/frontier.py):
English retention against Korean learning along training, every method at its learning rates and
seeds, and SCALE-Route's rows: its router sweep, or (from SCALE-Preserve's checkpoints' route
records, recipe/route_frontier.py) the paper's router, deployable and oracle routers and the
random and global-alpha controls.

    python tools/recipe_frontier.py --out results/DATE-smollm2-frontier \\
        runs/frontier/lr1e-3:scale-preserve:1e-3 runs/frontier/lr1e-3:full:1e-3 ...
    python tools/recipe_frontier.py --out results/frontier --old en en_modern en_passages --new ko \\
        --also-new ko_legal runs/fr/p1e-3:scale-preserve:1e-3:1234 runs/fr/p1e-3:scale-preserve:1e-3:1235 ...

Each RUN is [NAME=]WORKDIR:METHOD:LR[:SEED], a recipe WORKDIR (examples/scale_korean.sh), one of its
METHODS with the LR it trained at (the recipe's LR / LR_<METHOD>) and its SEED (the recipe's; the
run's folder is then METHOD-seedSEED); NAME draws a variant of a method (other flags, e.g.
--decoupled-lr) as a method of its own. Retention is the mean over the --old sets. Writes, each
atomically: OUT/frontier.json, frontier.md (the best retention at each learning level, mean and
spread over seeds, cells that are chords marked "~", retention capped at 1 beside raw, paired
differences) and frontier.png; the same per --also-new set in OUT/<set>/ and, with several --old
sets, per old set in OUT/by_set/<set>/; OUT/best_lr.md (which LR is best per method, seed and
level); OUT/final.md (every run's last evaluation on every set); OUT/route_detail.json (each
checkpoint's routers: unit, direction, tau, sweep) where Route rows come from route records.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from megatron_scale.data.files import atomic_write  # noqa: E402
from megatron_scale.evaluation.frontier import Run, retention_at  # noqa: E402
from megatron_scale.evaluation.frontier_report import write  # noqa: E402
from megatron_scale.recipe.frontier import LEVELS, Axis, Spec, axes, extras, final_table, runs_of  # noqa: E402


def route_rows(specs: list[Spec], axis: Axis, lrs: list[float] | None, units: list[str],
               calibrate_on: tuple[str, str], base: str | None = None) -> tuple[list[Run], list[dict], dict[tuple, tuple]]:
    """Route's rows from every SCALE-Preserve run with route records (recipe/route_frontier.py) at
    one of `lrs` (None: any), each router calibrated on the held-out windows of `calibrate_on`
    (old, new) whatever the axis: one router, scored on every axis. Also each such Preserve run's
    curve with its records' z_a where it did not evaluate, by (name, LR, seed)."""
    from megatron_scale.recipe.frontier import losses_of
    from megatron_scale.recipe.route_frontier import preserve_curve, records_files, records_losses, route_runs

    runs, detail, curves = [], [], {}
    for s in specs:
        if s.method == "scale-preserve" and records_files(s.run_dir):
            seed = s.trained_seed()
            curves[(s.name, s.lr, seed)] = preserve_curve(losses_of(s.metrics, axis, base), records_losses(s.run_dir),
                                                          axis, str(s.run_dir))
            if lrs is None or s.lr in lrs:
                got, d = route_runs(s.run_dir, s.lr, seed, axis, units=tuple(units), calibrate_on=calibrate_on)
                runs += got
                detail.append({"run": str(s.run_dir), "lr": s.lr, "seed": seed, "checkpoints": d})
    return runs, detail, curves


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN", help="[NAME=]WORKDIR:METHOD:LR[:SEED]")
    ap.add_argument("--out", required=True, help="folder for frontier.json / .md / .png and final.md")
    ap.add_argument("--old", nargs="+", default=["en"], help="the old domain's evaluation sets, retention their mean (default en)")
    ap.add_argument("--new", default="ko", help="the new domain's evaluation set (default ko)")
    ap.add_argument("--also-new", nargs="*", default=[], help="further new-domain sets, each a frontier of its own in OUT/SET/")
    ap.add_argument("--levels", type=float, nargs="+", default=list(LEVELS),
                    help="learning levels of the table (share of the base's new-domain bits per byte gone)")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="report A - B per seed at each level (repeatable)")
    ap.add_argument("--base-metrics", default=None,
                    help="a run's metrics.jsonl whose iteration-0 evaluation (the base model's) stands for the runs "
                         "that skipped theirs, where they evaluated the same windows (their start records agree)")
    ap.add_argument("--route-lrs", type=float, nargs="+", default=None,
                    help="Route's rows from the SCALE-Preserve runs at these LRs only (default: every run with route records)")
    ap.add_argument("--route-units", nargs="+", default=["token", "char"], choices=("token", "char", "word"),
                    help="the routing units of Route's rows (default token char; char and word need the records' tokenizer)")
    ap.add_argument("--sets", nargs="+", default=["en", "en_modern", "en_passages", "ko"],
                    help="the sets of final.md")
    ap.add_argument("--title", default="SmolLM2-135M-Instruct continued on Korean (CPU)")
    a = ap.parse_args(argv)
    try:
        specs = [Spec.parse(r) for r in a.runs]
        frontiers = [(Axis.of(a.old, a.new), a.out)]
        frontiers += [(Axis.of(a.old, n), os.path.join(a.out, n)) for n in a.also_new]
        if len(a.old) > 1:
            frontiers += [(Axis.of(o, a.new), os.path.join(a.out, "by_set", o)) for o in a.old]
        computed = []
        for axis, out in frontiers:
            routed, detail, preserve = route_rows(specs, axis, a.route_lrs, a.route_units, (a.old[0], a.new),
                                                  a.base_metrics)
            runs = [Run(r.method, r.lr, r.seed, preserve.get((r.method, r.lr, r.seed), r.curve))
                    for r in runs_of(specs, axis.old, axis.new, a.base_metrics)]
            # a sweep.json (tools/route_sweep.py) scores one old set: its controls and markers then
            more, markers, info = extras(specs, axis.old[0], axis.new) if len(axis.old) == 1 else ([], [], {})
            computed.append((axis, out, runs + routed + more, markers, info, detail))
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    extra = {"specs": [{"name": s.name, "workdir": str(s.workdir), "method": s.method, "lr": s.lr, "seed": s.seed}
                       for s in specs]}
    written = []
    for axis, out, runs, markers, info, detail in computed:
        os.makedirs(out, exist_ok=True)
        ax = axes(axis.old, axis.new)
        title = a.title if out == a.out and len(axis.old) == 1 and not a.also_new else (
            f"{a.title}: {ax.old_name} retention against {ax.new_name} learning")
        paths = write(runs, out, title, a.levels, ax, markers=markers, pairs=[tuple(p) for p in a.pair],
                      extra={**extra, "old": list(axis.old), "new": axis.new, "curves": info})
        written += list(paths.values())
        if out == a.out:
            atomic_write(os.path.join(out, "best_lr.md"), best_lr_table(runs, a.levels).encode("utf-8"))
            if detail:
                atomic_write(os.path.join(out, "route_detail.json"), (json.dumps(detail, indent=1) + "\n").encode("utf-8"))
                written.append(os.path.join(out, "route_detail.json"))
            with open(paths["md"], encoding="utf-8") as f:
                print(f.read())
    final = final_table(specs, tuple(a.sets), a.base_metrics)
    atomic_write(os.path.join(a.out, "final.md"), final.encode("utf-8"))
    print(final)
    print(f"wrote {', '.join(written)}, {os.path.join(a.out, 'final.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

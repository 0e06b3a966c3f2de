"""The real model's stability-plasticity frontier from finished recipe runs (megatron_scale/reports/recipe_frontier.py):
English retention against Korean learning along training, every method at its learning rates and
seeds, and SCALE-Route's rows: its router sweep, or (from SCALE-Preserve's checkpoints' route
records, reports/route_frontier.py) the paper's router, deployable and oracle routers and the
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
spread over seeds, cells that are chords marked "~", paired differences; each for retention raw,
capped at 1 on the mean and capped at 1 on each set) and frontier.png; the same per --also-new set in OUT/<set>/ and, with several --old
sets, per old set in OUT/by_set/<set>/; OUT/best_lr.md (which LR is best per method, seed and
level); OUT/reach.md and reach.json (the tokens each run needs to reach each level, and its
tokens/s); OUT/final.md (every run's last evaluation on every set); OUT/route_detail.json (each
checkpoint's routers: unit, direction, tau, sweep) where Route rows come from route records.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from megatron_scale.durable import atomic_write
from megatron_scale.reports.frontier import PER_SET, RAW, RETENTIONS, Run, as_retention, best_lr_table
from megatron_scale.reports.frontier_report import write
from megatron_scale.reports.reach import reach, reach_table
from megatron_scale.reports.recipe_frontier import LEVELS, Axis, Spec, axes, extras, final_table, prior_runs, runs_of
from megatron_scale.reports.route_frontier import route_rows


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
    ap.add_argument("--prior", default=None, metavar="FOLDER",
                    help="an earlier --out folder: its curves (every run, Route's rows and controls) stand beside "
                         "RUN's in each table; a (method, LR, seed) in both is an error")
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
            runs = [Run(r.method, r.lr, r.seed, *preserve[key]) if (key := (r.method, r.lr, r.seed)) in preserve else r
                    for r in runs_of(specs, axis.old, axis.new, a.base_metrics)]
            # a sweep.json (tools/route_sweep.py) scores one old set: its controls and markers then
            more, markers, info = extras(specs, axis.old[0], axis.new) if len(axis.old) == 1 else ([], [], {})
            runs += routed + more
            if a.prior:
                earlier = prior_runs(a.prior, os.path.relpath(out, a.out), axis)
                clash = {(r.method, r.lr, r.seed) for r in runs} & {(r.method, r.lr, r.seed) for r in earlier}
                if clash:
                    raise ValueError(f"--prior {a.prior} holds runs given again: {sorted(clash)}")
                runs += earlier
            computed.append((axis, out, runs, markers, info, detail))
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    extra = {"specs": [{"name": s.name, "workdir": str(s.workdir), "method": s.method, "lr": s.lr, "seed": s.seed}
                       for s in specs], **({"prior": a.prior} if a.prior else {})}
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
            per_set, _ = as_retention(runs, PER_SET, len(axis.old))
            atomic_write(os.path.join(out, "best_lr.md"), (
                f"Retention {RETENTIONS[RAW]}:\n\n{best_lr_table(runs, a.levels)}\nRetention {RETENTIONS[PER_SET]}:\n\n"
                f"{best_lr_table(per_set, a.levels)}").encode("utf-8"))
            if detail:
                atomic_write(os.path.join(out, "route_detail.json"), (json.dumps(detail, indent=1) + "\n").encode("utf-8"))
                written.append(os.path.join(out, "route_detail.json"))
            with open(paths["md"], encoding="utf-8") as f:
                print(f.read())
    rows = reach(specs, a.levels, a.new, a.base_metrics)
    atomic_write(os.path.join(a.out, "reach.json"), (json.dumps({"new": a.new, "levels": a.levels, "runs": rows},
                                                                indent=1) + "\n").encode("utf-8"))
    atomic_write(os.path.join(a.out, "reach.md"), (
        f"Tokens to each {a.new} learning level (first crossing, linear between the evaluations in brackets) and "
        f"tokens/s (median of the training records)\n\n{reach_table(rows, a.levels, a.new)}").encode("utf-8"))
    final = final_table(specs, tuple(a.sets), a.base_metrics)
    atomic_write(os.path.join(a.out, "final.md"), final.encode("utf-8"))
    print(final)
    print(f"wrote {', '.join(written)}, {os.path.join(a.out, 'reach.md')}, {os.path.join(a.out, 'final.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

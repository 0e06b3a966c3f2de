"""The real model's stability-plasticity frontier from finished recipe runs (megatron_scale/recipe/frontier.py):
English retention against Korean learning along training, every method at its learning rates, and
SCALE-Route's router sweep at every tau and statistic.

    python tools/recipe_frontier.py --out docs/recipe_frontier \\
        runs/frontier/lr1e-3:scale-preserve:1e-3 runs/frontier/lr1e-3:full:1e-3 ...

Each RUN is [NAME=]WORKDIR:METHOD:LR, a recipe WORKDIR (examples/scale_korean.sh) and one of its
METHODS with the LR it trained at (the recipe's LR / LR_<METHOD>); NAME draws a variant of a method
(other flags, e.g. --decoupled-lr) as a method of its own. Writes OUT/frontier.json, frontier.md
(the best retention at each learning level and the frontier's area) and frontier.png, and
OUT/final.md (every run's last evaluation on every set), each atomically.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from megatron_scale.data.files import atomic_write  # noqa: E402
from megatron_scale.evaluation.frontier_report import write  # noqa: E402
from megatron_scale.recipe.frontier import LEVELS, Spec, axes, extras, final_table, runs_of  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN", help="[NAME=]WORKDIR:METHOD:LR")
    ap.add_argument("--out", required=True, help="folder for frontier.json / .md / .png and final.md")
    ap.add_argument("--old", default="en", help="the old domain's evaluation set (default en)")
    ap.add_argument("--new", default="ko", help="the new domain's evaluation set (default ko)")
    ap.add_argument("--levels", type=float, nargs="+", default=list(LEVELS),
                    help="learning levels of the table (share of the base's new-domain bits per byte gone)")
    ap.add_argument("--sets", nargs="+", default=["en", "en_modern", "en_passages", "ko"],
                    help="the sets of final.md")
    ap.add_argument("--title", default="SmolLM2-135M-Instruct continued on Korean (CPU)")
    a = ap.parse_args(argv)
    try:
        specs = [Spec.parse(r) for r in a.runs]
        runs = runs_of(specs, a.old, a.new)
        more, markers, info = extras(specs, a.old, a.new)
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    os.makedirs(a.out, exist_ok=True)
    final = final_table(specs, tuple(a.sets))
    paths = write(runs + more, a.out, a.title, a.levels, axes(a.old, a.new), markers=markers,
                  extra={"specs": [{"name": s.name, "workdir": str(s.workdir), "method": s.method, "lr": s.lr} for s in specs],
                         "curves": info})
    atomic_write(os.path.join(a.out, "final.md"), final.encode("utf-8"))
    with open(paths["md"], encoding="utf-8") as f:
        print(f.read())
    print(final)
    print(f"wrote {', '.join(paths.values())}, {os.path.join(a.out, 'final.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

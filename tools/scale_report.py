#!/usr/bin/env python3
"""Forgetting / learning table of the recipe's runs, from their metrics JSONL files, with bits per
byte (--text-bytes) and benchmark accuracy before and after (--benchmarks).

    python tools/scale_report.py --base runs/base/metrics.jsonl \
        --run scale-preserve=runs/scale-preserve/metrics.jsonl --run full=runs/full/metrics.jsonl \
        --output report/

prints the table and writes report/results.json, report/report.md and report/perplexity.png.
All the work is in megatron_scale.reports.recipe.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="metrics JSONL holding the base model's evaluation")
    p.add_argument("--base-iteration", type=int, default=None,
                   help="take --base's evaluation at this iteration (0: before training) instead of its last")
    p.add_argument("--run", action="append", required=True, metavar="METHOD=METRICS", help="one per method")
    p.add_argument("--output", required=True, help="folder for results.json, report.md, perplexity.png")
    p.add_argument("--old", action="append", default=None,
                   help="evaluation set that measures forgetting (repeat for several; the first is the main one; default en)")
    p.add_argument("--new", action="append", default=None,
                   help="evaluation set that measures learning (repeat for several; the first is the main one; default ko)")
    p.add_argument("--route-sweep", default=None, metavar="SWEEP_JSON",
                   help="tools/route_sweep.py's sweep.json (with --keep-old): adds the SCALE-Route section")
    p.add_argument("--text-bytes", default=None, metavar="JSON",
                   help="tools/text_bytes.py's output: bits per byte beside every perplexity, and in the curves")
    p.add_argument("--benchmarks", action="append", default=[], metavar="MODEL=JSON",
                   help="tools/eval_benchmarks.py's output per model, base=... first: the accuracy section (repeatable)")
    p.add_argument("--failed", action="append", default=[], metavar="METHOD=WHY",
                   help="a method that did not finish, and why (listed in the report; repeat for several)")
    args = p.parse_args(argv)

    def pairs(items: list[str], flag: str, form: str) -> dict[str, str]:
        out = {}
        for item in items:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                p.error(f"{flag} {item!r}: expected {form}")
            out[name] = path
        return out

    bench = pairs(args.benchmarks, "--benchmarks", "MODEL=JSON")
    runs = pairs(args.run, "--run", "METHOD=METRICS")
    failed = dict(item.partition("=")[::2] for item in args.failed)
    from megatron_scale.reports.recipe import write_report

    try:
        results = write_report(args.base, runs, args.output, args.old or ["en"], args.new or ["ko"], args.base_iteration,
                               args.route_sweep, args.text_bytes, bench or None, failed)
    except (OSError, ValueError, KeyError) as e:
        print(f"scale_report.py: error: {e}", file=sys.stderr)
        return 2
    print(results["table"], end="")
    for part in ("route_sweep", "benchmarks"):
        if part in results:
            print(results[part]["section"], end="")
    for method, why in failed.items():
        print(f"not in the report: {method}: {why}")
    for claim, ok in results["checks"].items():
        print(f"{'yes' if ok else 'NO '}  {claim}")
    print(f"written: {args.output}/results.json, report.md, perplexity.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

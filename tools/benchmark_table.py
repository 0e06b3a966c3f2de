#!/usr/bin/env python3
"""Benchmark accuracy of several models beside a base's, from tools/eval_benchmarks.py's JSON files:
per task acc_norm where lm-evaluation-harness reports it (else acc) with its standard error, chance
(a uniform guess), and each model's change against the base paired over the same documents
(megatron_scale/reports/benchmarks.py, the recipe report's benchmark section).

    python tools/benchmark_table.py base=eval/base.json full=eval/full.json scale-preserve=eval/p.json \\
        --out eval/benchmarks.md

The first NAME=FILE is the base (named base). Writes OUT (the Markdown) and OUT's .json beside it
(every number), atomically; prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from megatron_scale.cli import name_value, run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", type=name_value("MODEL", "FILE"), metavar="NAME=FILE",
                   help="tools/eval_benchmarks.py's output per model, base=FILE first")
    p.add_argument("--out", required=True, help="the Markdown file to write (its numbers go to OUT's .json)")
    a = p.parse_args(argv)
    from megatron_scale.durable import atomic_write
    from megatron_scale.reports.benchmarks import section

    def work() -> dict:
        models = dict(a.models)
        if len(models) != len(a.models):
            raise ValueError("a model named twice")
        if a.models[0][0] != "base":
            raise ValueError(f"the first model must be base=FILE, got {a.models[0][0]}=")
        got = section(models)
        atomic_write(a.out, got["section"].lstrip("\n"))
        atomic_write(Path(a.out).with_suffix(".json"), json.dumps(got["numbers"], indent=1) + "\n")
        print(got["section"], file=sys.stderr)
        return {"out": a.out, "models": list(models)}

    return run_tool(work, (ValueError, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Each training run's own cells in a frontier.json (one run, not the best over LRs as frontier.md
shows): its retention at each learning level, read with the frontier's cell_at, and its last
(learning, retention). Routers' and controls' sweeps (a method holding "[") are left out.

    python tools/frontier_cells.py results/2026-11-29-smollm2-lr-grid/frontier.json [--levels 0.05 0.1 0.2]

Prints the table (stderr) and the runs' count (stdout, JSON); --out also writes the table there,
atomically. The work is megatron_scale/reports/frontier.py run_cells_table.
"""

from __future__ import annotations

import argparse
import json
import sys

from megatron_scale.cli import run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("frontier", metavar="FRONTIER_JSON", help="a frontier.json (reports/frontier_report.py)")
    p.add_argument("--levels", type=float, nargs="+", default=None, help="learning levels (default 0.05 0.1 0.2)")
    p.add_argument("--out", default=None, help="markdown file to write the table to")
    a = p.parse_args(argv)
    from megatron_scale.durable import atomic_write
    from megatron_scale.reports.frontier import RUN_LEVELS, run_cells_table

    def work() -> dict:
        with open(a.frontier, encoding="utf-8") as f:
            runs = json.load(f)["runs"]
        md = run_cells_table(runs, RUN_LEVELS if a.levels is None else a.levels)
        print(md, file=sys.stderr, end="")
        if a.out:
            atomic_write(a.out, md)
        return {"frontier": a.frontier, "rows": len(md.splitlines()) - 2}

    return run_tool(work, (OSError, ValueError, KeyError))


if __name__ == "__main__":
    sys.exit(main())

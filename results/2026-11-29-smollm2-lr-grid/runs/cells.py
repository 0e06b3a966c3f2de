"""Each training run's own cells in a frontier.json (one run, not the best over LRs as frontier.md
shows): retention at learning 0.05, 0.1 and 0.2, read with the frontier's cell_at ("~": a chord,
its two evaluations more than 0.05 apart), and the run's last (learning, retention).

    .venv/bin/python results/2026-11-29-smollm2-lr-grid/runs/cells.py results/2026-11-29-smollm2-lr-grid/frontier.json
"""

from __future__ import annotations

import json
import sys

from megatron_scale.reports.frontier import cell_at


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        runs = json.load(f)["runs"]
    print("| method | LR | seed | 5 % | 10 % | 20 % | last learning (retention) |\n|---|---|---|---|---|---|---|")
    for r in runs:
        if r["method"].startswith(("scale-route", "control")):  # routers and controls: many curves per run
            continue
        curve = [tuple(p) for p in r["curve"]]
        cells = []
        for level in (0.05, 0.1, 0.2):
            c = cell_at(curve, level)
            cells.append("not reached" if c is None else f"{'' if c.measured else '~'}{c.value:.4f}")
        learned, kept = curve[-1]
        print(f"| {r['method']} | {r['lr']:g} | {r['seed']} | {' | '.join(cells)} | {100 * learned:.1f} % ({kept:.4f}) |")


if __name__ == "__main__":
    main(sys.argv[1])

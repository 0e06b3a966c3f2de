"""How many tokens each run needs to reach each learning level, and how fast it trains: the
frontier's budget axis (science review 5: "the rows reach 20 % 7.3-8.4x later in tokens").

Per run of the recipe (reports/recipe_frontier.py Spec): its learning along its evaluations
(the frontier's new-domain score), the first crossing of each level read linearly between the two
evaluations that bracket it (the iteration, fractional), in tokens (iterations x global batch x
sequence length, from the run's start record), with the bracketing evaluations' tokens, so a
reader sees how far apart they were; and the median tokens/s of its training records (after the
first two: start-up), the rate the frontier's token ratios become time ratios at. Standard library only.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from megatron_scale.reports.recipe_frontier import Axis, Spec, losses_of
from megatron_scale.run_metrics import start_record


def crossing(points: Sequence[tuple[float, float]], level: float) -> tuple[float, float, float] | None:
    """The first (x, x_before, x_after) where y reaches `level` along (x, y) points in order, x linear
    between the two that bracket it; None where y never reaches it."""
    for i, (x, y) in enumerate(points):
        if y >= level:
            if i == 0:
                return x, x, x
            x0, y0 = points[i - 1]
            return x0 + (x - x0) * (level - y0) / (y - y0), x0, x
    return None


def training_rate(metrics: str | os.PathLike, skip: int = 2) -> float | None:
    """Median tokens/s of a run's training records after the first `skip` (all where there are no more)."""
    rates = [float(r["tokens_per_s"]) for r in map(json.loads, Path(metrics).read_text().splitlines())
             if r.get("kind") == "train" and "tokens_per_s" in r]
    return statistics.median(rates[skip:] or rates) if rates else None


def reach(specs: Sequence[Spec], levels: Sequence[float], new: str, base: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Per run: its name, LR, seed, tokens per iteration, tokens/s, and per level the tokens where its
    learning on `new` first reaches the level (None: never) with the bracketing evaluations' tokens."""
    out = []
    for s in specs:
        start = start_record(s.metrics)
        per_iter = int(start.get("global_batch_size") or 0) * int(start.get("seq_length") or 0)
        if per_iter <= 0:
            raise ValueError(f"{s.metrics}: its start record gives no global batch and sequence length")
        losses = losses_of(s.metrics, Axis(new, ()), base)
        points = [(it * per_iter, 1.0 - v[new] / losses[0][new]) for it, v in losses.items()]
        at = {}
        for level in levels:
            got = crossing(points, level)
            at[str(level)] = None if got is None else {"tokens": got[0], "between": [got[1], got[2]]}
        out.append({"name": s.name, "lr": s.lr, "seed": s.trained_seed(), "tokens_per_iter": per_iter,
                    "tokens_per_s": training_rate(s.metrics), "last_tokens": points[-1][0],
                    "last_learning": points[-1][1], "levels": at})
    return out


def _k(tokens: float) -> str:
    if tokens >= 1e6:
        return f"{tokens / 1e6:.2f}M"
    return f"{tokens / 1e3:.1f}k" if tokens >= 1e3 else f"{tokens:.0f}"


def reach_table(rows: Sequence[dict[str, Any]], levels: Sequence[float], new: str) -> str:
    """Markdown: per run, the tokens to each level (the bracketing evaluations'), tokens/s, and its last evaluation."""
    head = " | ".join(f"tokens to {new} learning {lv:g}" for lv in levels)
    lines = [f"| run | LR | seed | tokens/s | {head} | last evaluation |", "|---|---|---|---|" + "---|" * len(levels) + "---|"]
    for r in rows:
        cells = []
        for lv in levels:
            got = r["levels"][str(lv)]
            cells.append("not reached" if got is None else
                         f"{_k(got['tokens'])} ({_k(got['between'][0])}-{_k(got['between'][1])})")
        rate = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}"
        lines.append(f"| {r['name']} | {r['lr']:g} | {r['seed']} | {rate} | " + " | ".join(cells)
                     + f" | {_k(r['last_tokens'])}: {r['last_learning']:.3f} |")
    return "\n".join(lines) + "\n"


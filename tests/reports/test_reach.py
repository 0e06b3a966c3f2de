"""The tokens each run needs to reach each learning level (reports/reach.py), worked by hand: a run
of 2 x 4 tokens a step evaluated at iterations 0, 2 and 4 learns 10 % by 16 tokens and 30 % by 32,
so it reaches 20 % at 24 tokens (linear between the two), 5 % at 8, and never 40 %; its rate is the
median of its training records after the first two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_scale.reports.reach import crossing, reach, reach_table
from megatron_scale.reports.recipe_frontier import Spec


def test_tokens_to_each_level_and_the_rate(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "full-seed7"
    run.mkdir(parents=True)
    lines = [{"kind": "start", "seed": 7, "global_batch_size": 2, "seq_length": 4}]
    lines += [{"kind": "train", "iteration": i, "tokens_per_s": t} for i, t in ((1, 5.0), (2, 90.0), (3, 100.0), (4, 120.0))]
    lines += [{"kind": "eval/ko", "iteration": it, "lm_loss": v} for it, v in ((0, 3.0), (2, 2.7), (4, 2.1))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (row,) = reach([Spec.parse(f"{tmp_path}:full:1e-4:7")], [0.05, 0.2, 0.4], "ko")
    assert row["tokens_per_iter"] == 8 and row["tokens_per_s"] == 110.0  # the median of 100 and 120
    assert row["levels"]["0.2"]["tokens"] == pytest.approx(24.0) and row["levels"]["0.2"]["between"] == [16, 32]
    assert row["levels"]["0.05"]["tokens"] == pytest.approx(8.0) and row["levels"]["0.4"] is None
    assert "| full | 0.0001 | 7 | 110 | 8 (0-16) | 24 (16-32) | not reached | 32: 0.300 |" in reach_table([row], [0.05, 0.2, 0.4], "ko")
    assert crossing([(0, 0.0), (10, 0.5), (20, 0.2), (30, 0.6)], 0.25) == (5.0, 0, 10)  # the first crossing

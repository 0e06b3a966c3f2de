"""Issue 44's frontier pieces on hand-made numbers: which cells are measured and which are chords,
seed-paired differences, retention capped at 1, and the written report that marks them."""

import json
import math
from pathlib import Path

import pytest

from megatron_scale.reports.frontier import Run, cell_at, default_gap, paired, summarise, table
from megatron_scale.reports.frontier_report import Axes, Marker, write

# a fast learner seen every 50 steps: task 1 jumps 0.04 -> 0.60 between two evaluations
SPARSE = [(0.04, 0.99), (0.60, 0.75), (0.70, 0.70), (0.96, 0.50)]
# the same learner seen densely: every level lies between two evaluations at most 0.1 apart
DENSE = [(0.04, 0.99), (0.45, 0.90), (0.55, 0.85), (0.75, 0.70), (0.85, 0.65), (0.90, 0.60), (0.96, 0.55)]
LEVELS = (0.5, 0.8, 0.95)


def test_a_cell_is_measured_only_between_two_evaluations_no_further_apart_than_the_levels():
    assert default_gap(LEVELS) == pytest.approx(0.15) and default_gap([0.05, 0.1, 0.2]) == pytest.approx(0.05)
    gap = default_gap(LEVELS)
    c = cell_at(SPARSE, 0.5, gap)  # the chord from 0.04 to 0.60: 0.99 - 0.24 * 0.46 / 0.56
    assert c.value == pytest.approx(0.99 - 0.24 * 0.46 / 0.56) and not c.measured and c.gap == pytest.approx(0.56)
    assert not cell_at(SPARSE, 0.8, gap).measured  # 0.70 -> 0.96: 0.26 apart
    for level, value in ((0.5, 0.875), (0.8, 0.675), (0.95, 0.6 - 0.05 * 0.05 / 0.06)):
        c = cell_at(DENSE, level, gap)
        assert c.measured and c.value == pytest.approx(value), level
    on_it = cell_at(SPARSE, 0.60, 0.0)  # an evaluation on the level is a measurement at any gap
    assert on_it.measured and on_it.value == 0.75 and on_it.gap == 0.0
    assert cell_at(SPARSE, 0.99, gap) is None
    # two crossings of one value: the measured one is kept
    twice = [(0.0, 1.0), (1.0, 0.0), (0.45, 0.5), (0.55, 0.5)]
    assert cell_at(twice, 0.5, 0.15).measured
    with pytest.raises(ValueError, match="max_gap"):
        cell_at(SPARSE, 0.5, -1.0)


def test_the_table_marks_a_seed_whose_best_is_a_chord():
    runs = [Run("full", 3e-4, 1, tuple(SPARSE)), Run("full", 3e-4, 2, tuple(DENSE)), Run("dense", 1e-4, 1, tuple(DENSE))]
    s = summarise(runs, LEVELS)
    at5 = s["full"]["levels"][0.5]
    assert at5.seeds == (1, 2) and at5.measured == (False, True) and at5.chords == 1
    assert at5.values == pytest.approx((0.99 - 0.24 * 0.46 / 0.56, 0.875))
    text = table(s, LEVELS)
    assert f"| full | 2 | ~{at5.mean:.3f} [{at5.low:.3f}, {at5.high:.3f}] (~1/2) |" in text
    assert "| dense | 1 | 0.875 | 0.675 | 0.558 |" in text  # no mark where every seed is measured


def test_seed_pairing_takes_per_seed_differences_of_the_best_over_lrs():
    a = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6}  # seed 4 has no b: left out
    b = {1: 0.7, 2: 0.75, 3: 0.72}
    runs = [Run("a", 1e-3, s, ((0.5, v),)) for s, v in a.items()]
    runs += [Run("a", 1e-4, 1, ((0.5, 0.85),))]  # a worse LR of seed 1: not the best
    runs += [Run("b", 1e-3, s, ((0.5, v),)) for s, v in b.items()]
    p = paired(summarise(runs, [0.5]), "a", "b", 0.5)
    diffs = [0.2, 0.05, -0.02]
    assert p.diff.seeds == (1, 2, 3) and p.diff.values == pytest.approx(diffs)
    assert p.diff.mean == pytest.approx(sum(diffs) / 3) and (p.diff.low, p.diff.high) == pytest.approx((-0.02, 0.2))
    mean = sum(diffs) / 3
    assert p.diff.sd == pytest.approx(math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2))
    assert p.ahead == 2 and p.chords == 0 and str(p).endswith("2/3 > 0")


def test_capped_retention_gives_no_credit_above_one():
    curve = ((0.0, 1.0), (0.1, 1.02), (0.2, 0.98))
    raw, cap = (summarise([Run("m", 1e-3, 0, curve)], [0.1, 0.15], cap=c)["m"]["levels"] for c in (None, 1.0))
    assert raw[0.1].mean == pytest.approx(1.02) and cap[0.1].mean == pytest.approx(1.0)
    assert raw[0.15].mean == pytest.approx(1.0) and cap[0.15].mean == pytest.approx(0.99)


def test_the_report_writes_chords_capped_table_pairs_and_markers(tmp_path: Path):
    axes = Axes(new="ko learning", old="en retention", new_name="ko", old_name="en", new_label="ko", old_label="en",
                limits=None)
    runs = [Run("full", 1e-4, s, ((0.0, 1.0), (0.18, 1.01), (0.2, 1.0))) for s in (1, 2)]
    runs += [Run("route[x, ours]", 1e-3, s, ((0.0, 1.0), (0.1, 0.99), (0.2, 0.9))) for s in (1, 2)]
    markers = [Marker("route[x, deployable]", 1e-3, s, (0.1, 0.97 + 0.01 * s), "route[x, ours]") for s in (1, 2)]
    paths = write(runs, str(tmp_path), "t", [0.05, 0.1], axes, pairs=[("full", "route[x, ours]")], markers=markers,
                  sections=[("trained", ["full"])])
    md = Path(paths["md"]).read_text()
    # full's cells lie on the chord from 0 to 0.18 (wider than the 0.05 between levels)
    assert "| full | 2 | ~1.003 [1.003, 1.003] (~2/2) | ~1.006 [1.006, 1.006] (~2/2) |" in md and "is a chord" in md
    assert "### en retention, capped mean: min(mean over the old sets, 1)" in md and "**Other rows**" in md
    assert "One old set: per-set capping is the capped mean above." in md
    assert "| full - route[x, ours] | " in md and "(~2 chord)" in md
    # the markers: 0.98 and 0.99 against the envelope's 0.99 at learning 0.1
    assert "| route[x, deployable] | 0.001 | 2 | 0.100 [0.100, 0.100] | 0.985 [0.980, 0.990] | 0.990 [0.990, 0.990] " \
           "| -0.005 [-0.010, +0.000] |" in md
    doc = json.loads(Path(paths["json"]).read_text())
    assert doc["max_gap"] == pytest.approx(0.05) and doc["summary_capped_at_1"]["full"]["levels"]["0.1"]["mean"] <= 1.0
    assert [(p["a"], p["level"], p["ahead"]) for p in doc["paired"]] == [("full", 0.05, 2), ("full", 0.1, 2)]
    assert Path(paths["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_optimum_table_says_whether_each_seeds_best_lr_is_interior():
    from megatron_scale.reports.frontier import optimum_table

    runs = [Run("m", lr, seed, ((0.5, v),)) for seed, best in ((1, 1e-3), (2, 1e-4))
            for lr, v in ((1e-4, 0.7), (1e-3, 0.8), (1e-2, 0.6)) for v in [0.9 if lr == best else v]]
    s = summarise(runs, [0.5])
    assert s["m"]["lrs"] == [1e-4, 1e-3, 1e-2] and s["m"]["levels"][0.5].lrs == (1e-3, 1e-4)
    assert "| m | 0.0001, 0.001, 0.01 | 0.001, 0.0001 (interior 1/2) |" in optimum_table(s, [0.5])


def test_each_runs_own_cells_from_a_committed_frontier(capsys: pytest.CaptureFixture[str]) -> None:
    """tools/frontier_cells.py (results/2026-11-29-smollm2-lr-grid/runs/cells.sh): per training run,
    not the best over LRs; the routers' and controls' sweeps ("[" in the method) are left out."""
    import sys

    from megatron_scale.reports.frontier import run_cells_table

    runs = [{"method": "full", "lr": 1e-4, "seed": 1, "curve": [[0.0, 1.0], [0.1, 0.9], [0.3, 0.7]]},
            {"method": "scale-route[cosine]", "lr": 1e-4, "seed": 1, "curve": [[0.0, 1.0]]}]
    assert run_cells_table(runs).splitlines() == [
        "| method | LR | seed | 5 % | 10 % | 20 % | last learning (retention) |", "|---|---|---|---|---|---|---|",
        "| full | 0.0001 | 1 | 0.9500 | 0.9000 | 0.8000 | 30.0 % (0.7000) |"]
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tools"))
    import frontier_cells

    assert frontier_cells.main([str(root / "results" / "2026-11-29-smollm2-lr-grid" / "frontier.json")]) == 0
    table = capsys.readouterr().err.splitlines()
    # notes.md's "full fine-tuning 1e-4 (v2)" and "SCALE-Preserve 3e-3" rows
    assert "| full | 0.0001 | 1234 | 1.0015 | 1.0047 | 1.0050 | 24.9 % (1.0027) |" in table
    assert "| scale-preserve | 0.003 | 1234 | 0.9878 | 0.9410 | not reached | 14.5 % (0.9449) |" in table
    assert len(table) == 19 and not any("[" in row for row in table)

"""The gate against the routed control (reports/bio_control.py, tools/bio_routed_control.py):

- on hand-made stage files, the control routes each probe by the gate's own rule (z_p's answer where
  its statistic is >= tau, z_a's elsewhere), the gate is read at the control's routed task-1 level
  on its curve (linear between evaluations, best over its LRs; a chord marked), and the summary is
  per seed, per control LR and stop level, and mean [min, max] over seeds; the same control twice,
  or a gated stage without a gate, is one error naming the files;
- on the committed stage files of results/2026-11-28-biography-frontier-v2 it gives the numbers
  science review 5 recomputed by hand: +0.011 [+0.005, +0.019] over every full-FT LR (per seed
  +0.0189 / +0.0055 / +0.0071) and -0.001 at full FT's good LRs (1e-5, 3e-5, 1e-4), whose single
  points are +0.023 / +0.010 / +0.022 (seed 1234), -0.007 / -0.012 / -0.017 (1235) and
  -0.004 / -0.008 / -0.015 (1236).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from megatron_scale.reports.bio_control import Router, routed_accuracy, routed_control

ROOT = Path(__file__).resolve().parents[2]
V2 = ROOT / "results" / "2026-11-28-biography-frontier-v2"
GATE = "+gate-max-prob-0.8-0.05-above"


def _stage(folder: Path, seed: int, name: str, settings: dict, result: dict) -> None:
    path = folder / f"seed{seed}" / "stages" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "result": result}))


def _records(p: list[int], a: list[int], stat: list[float]) -> dict:
    return {"correct_p": p, "correct_a": a, "stat/max-prob": stat}


def test_the_control_routes_by_the_gates_rule_and_meets_the_gate_at_its_level(tmp_path: Path) -> None:
    assert routed_accuracy(_records([1, 0, 1, 0], [0, 1, 0, 0], [0.9, 0.5, 0.8, 0.1]), Router("max-prob", 0.8)) == 0.75
    assert routed_accuracy(_records([1, 0, 1, 0], [0, 1, 0, 0], [0.9, 0.5, 0.8, 0.1]),
                           Router("max-prob", 0.8, "below")) == 0.25  # z_p where the statistic is <= tau
    gate = {"gate_statistic": "max-prob", "gate_tau": 0.8, "gate_direction": None}
    for seed, t0_gate in ((1, 0.9), (2, 0.7)):
        # the gate at 1e-3: task 1 0 -> 0.45 -> 0.55 -> 0.8 (task 0 1.0 -> t0_gate -> t0_gate - 0.1 -> 0.6);
        # at 3e-3 two evaluations only
        _stage(tmp_path, seed, f"task1_scale-preserve{GATE}_lr0.001.json", gate,
               {"accuracy": {"task1": [0.0, 0.45, 0.55, 0.8], "task0": [1.0, t0_gate, t0_gate - 0.1, 0.6]}})
        _stage(tmp_path, seed, f"task1_scale-preserve{GATE}_lr0.003.json", gate,
               {"accuracy": {"task1": [0.0, 0.8], "task0": [1.0, 0.5]}})
        # the control: task 1: two probes kept on z_p (confident, wrong), two on z_a (right) -> 0.5 routed;
        # task 0: every probe on z_p, 3 of 4 right -> 0.75
        final = {"task1": _records([0, 0, 1, 1], [1, 1, 1, 1], [0.9, 0.85, 0.1, 0.2]),
                 "task0": _records([1, 1, 1, 0], [0, 0, 0, 0], [0.9, 0.9, 0.95, 0.99])}
        _stage(tmp_path, seed, "task1_full_lr1e-05.json", {"task1_stop_at": 0.6},
               {"final_records": final, "stopped_at": 40, "accuracy": {}})
    (got,) = routed_control(tmp_path).values()
    assert got["router"] == {"statistic": "max-prob", "tau": 0.8, "direction": "above"}
    by_seed = {m["seed"]: m for m in got["matches"]}
    # the gate at task 1 0.5: in seed 1, halfway from 0.45 to 0.55 at 1e-3 (0.85; 3e-3's chord from 0 to 0.8
    # gives 0.6875); in seed 2 that chord (0.6875) beats 1e-3's 0.65, and is marked one
    assert by_seed[1]["gate"] == pytest.approx(0.85) and by_seed[1]["gate_lr"] == 0.001
    assert by_seed[1]["measured"] and by_seed[1]["diff"] == pytest.approx(0.85 - 0.75)
    assert by_seed[2]["gate"] == pytest.approx(1.0 - 0.5 / 0.8 * 0.5) and by_seed[2]["gate_lr"] == 0.003
    assert not by_seed[2]["measured"] and by_seed[2]["diff"] == pytest.approx(0.6875 - 0.75)
    row = got["summary"]["rows"]["0.6/1e-05"]
    assert row["mean"] == pytest.approx((0.1 - 0.0625) / 2) and row["n"] == 2
    assert "| 1 | 1e-05 | 0.6 | 40 | 0.500 | 0.750 | 0.850 (0.001) | +0.100 |" in got["markdown"]
    assert "| 2 | 1e-05 | 0.6 | 40 | 0.500 | 0.750 | ~0.688 (0.003) | -0.062 |" in got["markdown"]
    # the same control from a second folder is refused, naming both files
    copy = tmp_path / "again"
    _stage(copy, 1, "task1_full_lr1e-05.json", {"task1_stop_at": 0.6},
           {"final_records": json.loads((tmp_path / "seed1/stages/task1_full_lr1e-05.json").read_text())["result"][
               "final_records"], "stopped_at": 40})
    with pytest.raises(ValueError, match="the same control .*seed 1, LR 1e-05"):
        routed_control(tmp_path, [tmp_path, copy])
    with pytest.raises(ValueError, match="no gated stage"):
        routed_control(copy)


def test_the_committed_biography_frontier_gives_the_reviews_numbers(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import bio_routed_control

    assert bio_routed_control.main([str(V2), "--good-lrs", "1e-5", "3e-5", "1e-4", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "routed_control.json").read_text())[GATE]
    every = doc["summary"]["levels"]["all"]
    assert [round(every["by_seed"][s], 4) for s in ("1234", "1235", "1236")] == [0.0189, 0.0055, 0.0071]
    assert (round(every["mean"], 3), round(every["min"], 3), round(every["max"], 3)) == (0.011, 0.005, 0.019)
    assert every["single_points"]["n"] == 21
    good = doc["summary_at"]["levels"]["0.95"]
    assert good["lrs"] == [1e-5, 3e-5, 1e-4] and round(good["mean"], 3) == -0.001
    single = {(m["seed"], m["lr"]): round(m["diff"], 3) for m in doc["matches"]}
    assert [single[(s, lr)] for s in (1234, 1235, 1236) for lr in (1e-5, 3e-5, 1e-4)] == [
        0.023, 0.010, 0.022, -0.007, -0.012, -0.017, -0.004, -0.008, -0.015]
    assert "every control" in (tmp_path / "routed_control.md").read_text()


def test_the_gate_read_at_some_of_its_lrs_gives_the_notes_figures() -> None:
    """results/2026-11-28-biography-frontier-v2/runs/gate_control.sh: the gate at 1e-3 and 3e-3
    (before seed 1234's 3e-4 ran) and at 1e-3 alone, as notes.md gives them."""
    for gate_lrs, seeds, spread in (([1e-3, 3e-3], [0.0176, 0.0055, 0.0071], (0.010, 0.005, 0.018)),
                                    ([1e-3], [0.0176, 0.0044, 0.0064], (0.009, 0.004, 0.018))):
        (got,) = routed_control(V2, gate_lrs=gate_lrs).values()
        every = got["summary"]["levels"]["all"]
        assert [round(every["by_seed"][s], 4) for s in (1234, 1235, 1236)] == seeds
        assert (round(every["mean"], 3), round(every["min"], 3), round(every["max"], 3)) == spread
        assert {m["gate_lr"] for m in got["matches"]} <= set(gate_lrs)

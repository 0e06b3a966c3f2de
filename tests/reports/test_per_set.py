"""Retention over several old sets read three ways (reports/frontier.py as_retention), with numbers a
reader checks by hand: one set at 0.99 and two at 1.01 are raw (0.99 + 1.01 + 1.01) / 3 = 1.0033,
capped mean min(1.0033, 1) = 1.0, per-set capped (0.99 + 1 + 1) / 3 = 0.9967. A gain on two sets
hides a loss on the third in the first two readings, not in the third: a paired difference can
change sign. The report writes all three (frontier.md, frontier.json), the recipe's runs carry each
evaluation's per-set retentions (reports/recipe_frontier.py), and an earlier frontier's curves get
theirs from its by_set/ curves where they line up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_scale.reports.frontier import CAPPED, PER_SET, RAW, Run, as_retention, paired, summarise

PARTS_A = ((1.0, 1.0, 1.0), (0.99, 1.01, 1.01))  # iteration 0, then one loss and two gains
PARTS_B = ((1.0, 1.0, 1.0), (1.0, 1.0, 0.999))  # nothing gained, 0.1 % lost on one set


def _run(method: str, parts: tuple, seed: int = 1) -> Run:
    return Run(method, 1e-4, seed, tuple((n, sum(p) / 3) for n, p in zip((0.0, 0.1), parts)), parts)


def test_three_readings_of_one_loss_and_two_gains() -> None:
    runs = [_run("a", PARTS_A), _run("b", PARTS_B)]
    cells = {mode: summarise(as_retention(runs, mode, 3)[0], [0.1]) for mode in (RAW, CAPPED, PER_SET)}
    a = {mode: s["a"]["levels"][0.1].mean for mode, s in cells.items()}
    assert a[RAW] == pytest.approx(3.01 / 3) and round(a[RAW], 4) == 1.0033
    assert a[CAPPED] == 1.0
    assert a[PER_SET] == pytest.approx(2.99 / 3) and round(a[PER_SET], 4) == 0.9967
    b = {mode: s["b"]["levels"][0.1].mean for mode, s in cells.items()}
    assert b[RAW] == b[CAPPED] == pytest.approx(2.999 / 3) and b[PER_SET] == pytest.approx(2.999 / 3)  # no gain: all equal
    # a - b: +0.0037 raw, +0.0003 capped mean, -0.0030 per-set capped
    diff = {mode: paired(cells[mode], "a", "b", 0.1).diff.mean for mode in cells}
    assert diff[RAW] == pytest.approx(0.011 / 3) and diff[CAPPED] == pytest.approx(0.001 / 3)
    assert diff[PER_SET] == pytest.approx(-0.009 / 3)
    # a curve of several sets without its parts is left out of the per-set reading, not capped silently
    bare = Run("c", 1e-4, 1, ((0.0, 1.0), (0.1, 1.01)))
    kept, left = as_retention([bare], PER_SET, 3)
    assert kept == [] and left == [bare]
    # one old set: per-set capping is the capped mean
    (one,), _ = as_retention([bare], PER_SET, 1)
    assert one.curve == ((0.0, 1.0), (0.1, 1.0))
    with pytest.raises(ValueError, match="retention 'median'"):
        as_retention([bare], "median")


def test_the_report_writes_the_three_readings(tmp_path: Path) -> None:
    from megatron_scale.reports.frontier_report import Axes, write

    axes = Axes(new="ko learning", old="mean(en, m, p) retention", new_name="ko", old_name="mean(en, m, p)",
                new_label="ko", old_label="en", limits=None, old_sets=3)
    runs = [_run("a", PARTS_A), _run("b", PARTS_B)]
    paths = write(runs, str(tmp_path), "t", [0.1], axes, pairs=[("a", "b")])
    md = Path(paths["md"]).read_text()
    raw, capped, per_set = md.split("### ")[1:4]
    assert raw.startswith("mean(en, m, p) retention, raw") and "| a | 1 | 1.003 | " in raw
    assert capped.startswith("mean(en, m, p) retention, capped mean") and "| a | 1 | 1.000 | " in capped
    assert per_set.startswith("mean(en, m, p) retention, per-set capped") and "| a | 1 | 0.997 | " in per_set
    assert "| a - b | +0.004, 1/1 > 0 |" in raw and "| a - b | -0.003, 0/1 > 0 |" in per_set
    doc = json.loads(Path(paths["json"]).read_text())
    assert doc["summary_per_set_capped"]["a"]["levels"]["0.1"]["mean"] == pytest.approx(2.99 / 3)
    assert doc["summary_capped_at_1"]["a"]["levels"]["0.1"]["mean"] == 1.0
    assert doc["paired_per_set_capped"][0]["mean"] == pytest.approx(-0.009 / 3)
    assert [r["parts"] for r in doc["runs"] if r["method"] == "a"] == [[list(p) for p in PARTS_A]]


def test_recipe_runs_carry_per_set_retentions_and_priors_get_theirs_from_by_set(tmp_path: Path) -> None:
    from megatron_scale.reports.recipe_frontier import Axis, prior_runs, training_run

    old = ("en", "en_modern", "en_passages")
    base = {"en": 2.0, "en_modern": 3.0, "en_passages": 4.0, "ko": 5.0}
    later = {"en": 2.0 / 0.99, "en_modern": 3.0 / 1.01, "en_passages": 4.0 / 1.01, "ko": 4.0}
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"kind": f"eval/{s}", "iteration": it, "lm_loss": v}) + "\n"
                               for it, losses in ((0, base), (8, later)) for s, v in losses.items()))
    run = training_run("full", 1e-4, 1, metrics, old, "ko")
    assert [list(p) for p in run.parts] == [pytest.approx([1.0, 1.0, 1.0]), pytest.approx([0.99, 1.01, 1.01])]
    assert run.curve[1] == pytest.approx((0.2, 3.01 / 3))
    # an earlier frontier without parts: each set's own curve from its by_set/ folder
    (tmp_path / "prior").mkdir()
    entry = {"method": "full", "lr": 1e-4, "seed": 1, "curve": [list(p) for p in run.curve]}
    (tmp_path / "prior" / "frontier.json").write_text(json.dumps({"old": list(old), "new": "ko", "runs": [entry]}))
    for i, s in enumerate(old):
        (tmp_path / "prior" / "by_set" / s).mkdir(parents=True)
        curve = [[n, p[i]] for (n, _), p in zip(run.curve, run.parts)]
        (tmp_path / "prior" / "by_set" / s / "frontier.json").write_text(json.dumps({"runs": [{**entry, "curve": curve}]}))
    (prior,) = prior_runs(tmp_path / "prior", ".", Axis.of(old, "ko"))
    assert [list(p) for p in prior.parts] == [pytest.approx(list(p)) for p in run.parts]
    # by_set curves that do not average to the curve's retention are another run's: no parts
    (tmp_path / "prior" / "by_set" / "en" / "frontier.json").write_text(json.dumps(
        {"runs": [{**entry, "curve": [[0.0, 1.0], [0.2, 0.98]]}]}))
    (prior,) = prior_runs(tmp_path / "prior", ".", Axis.of(old, "ko"))
    assert prior.parts == ()


def test_the_committed_v2_frontier_gives_the_reviews_per_set_capped_cells() -> None:
    """Science review 5 recomputed full fine-tuning at 1e-4 (3 seeds) per-set capped from v2's by_set/
    curves: 0.9988-0.9990 at 10 % learning, 0.9984 / 0.9985 / 0.9999 at 20 %, where raw is 1.003-1.006."""
    from megatron_scale.reports.recipe_frontier import Axis, prior_runs

    v2 = Path(__file__).resolve().parents[2] / "results" / "2026-11-28-smollm2-frontier-v2"
    runs = [r for r in prior_runs(v2, ".", Axis.of(("en", "en_modern", "en_passages"), "ko"))
            if (r.method, r.lr) == ("full", 1e-4)]
    assert sorted(r.seed for r in runs) == [1234, 1235, 1236] and all(r.parts for r in runs)
    cells = {mode: summarise(as_retention(runs, mode, 3)[0], [0.1, 0.2])["full"]["levels"] for mode in (RAW, PER_SET)}
    assert [round(v, 4) for v in cells[PER_SET][0.1].values] == [0.999, 0.9988, 0.9988]
    assert [round(v, 4) for v in cells[PER_SET][0.2].values] == [0.9984, 0.9985, 0.9999]
    assert all(v > 1.003 for v in cells[RAW][0.1].values + cells[RAW][0.2].values)

"""megatron_scale.recipe.report: the recipe's table, checks and plot from metrics JSONL files
(the last evaluation of each run against the base's)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from megatron_scale.recipe.report import curve, write_report


def _metrics(path: Path, evals: dict[int, dict[str, float]], route: float | None = None) -> str:
    lines = [json.dumps({"kind": "train", "iteration": 1, "lm_loss": 5.0})]
    for it, sets in evals.items():
        for name, ppl in sets.items():
            rec = {"kind": f"eval/{name}", "iteration": it, "lm_loss": math.log(ppl), "ppl": ppl}
            if route is not None:
                rec["preserve_fraction"] = route
            lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_table_checks_and_plot(tmp_path: Path) -> None:
    base = _metrics(tmp_path / "base.jsonl", {300: {"en": 100.0, "ko": 1000.0}})
    runs = {
        "scale-preserve": _metrics(tmp_path / "p.jsonl", {10: {"en": 500.0, "ko": 900.0}, 20: {"en": 110.0, "ko": 200.0}}),
        "scale-route": _metrics(tmp_path / "r.jsonl", {20: {"en": 101.0, "ko": 300.0}}, route=0.75),
        "full": _metrics(tmp_path / "f.jsonl", {20: {"en": 180.0, "ko": 1200.0}}),
    }
    res = write_report(base, runs, tmp_path / "out")
    # the last evaluation counts, not an earlier one
    assert res["runs"][0]["iteration"] == 20 and res["runs"][0]["ppl"] == {"en": 110.0, "ko": 200.0}
    assert res["checks"] == {
        "ko perplexity falls for scale-preserve": True, "ko perplexity falls for scale-route": True,
        "ko perplexity falls for full": False, "scale-preserve forgets less en than full": True,
    }
    table = (tmp_path / "out" / "report.md").read_text()
    assert "| SCALE-Preserve | 110.00 | +10.0% | 200.00 | -80.0% |  |" in table
    assert "| SCALE-Route | 101.00 | +1.0% | 300.00 | -70.0% | 0.750 / 0.750 |" in table
    assert (tmp_path / "out" / "perplexity.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "out" / "results.json").read_text())["table"] == table


def test_several_old_domain_sets_and_curves(tmp_path: Path) -> None:
    """--old en --old en_modern: a column pair each, a check each; the plot has a panel per set."""
    base = _metrics(tmp_path / "base.jsonl", {0: {"en": 100.0, "en_modern": 20.0, "ko": 1000.0}})
    runs = {
        "scale-preserve": _metrics(tmp_path / "p.jsonl", {0: {"en": 100.0, "en_modern": 20.0, "ko": 1000.0},
                                                           10: {"en": 120.0, "en_modern": 25.0, "ko": 400.0}}),
        "full": _metrics(tmp_path / "f.jsonl", {10: {"en": 110.0, "en_modern": 40.0, "ko": 300.0}}),
    }
    res = write_report(base, runs, tmp_path / "out", old=("en", "en_modern"), base_iteration=0)
    assert res["checks"] == {
        "ko perplexity falls for scale-preserve": True, "ko perplexity falls for full": True,
        "scale-preserve forgets less en than full": False, "scale-preserve forgets less en_modern than full": True,
    }
    lines = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert lines[0].startswith("| method | en PPL (forgetting) | en change | en_modern PPL (forgetting) |")
    assert "| SCALE-Preserve | 120.00 | +20.0% | 25.00 | +25.0% | 400.00 | -60.0% |  |" in lines
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert curve(runs["scale-preserve"], "ko") == [(0, 1000.0), (10, 400.0)]
    assert (tmp_path / "out" / "perplexity.png").stat().st_size > 10_000


def test_a_run_without_evaluation_is_named(tmp_path: Path) -> None:
    base = _metrics(tmp_path / "base.jsonl", {1: {"en": 100.0, "ko": 1000.0}})
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"kind": "train", "iteration": 1}) + "\n")
    with pytest.raises(ValueError, match="bare.jsonl: no evaluation records"):
        write_report(base, {"full": str(bare)}, tmp_path / "out")
    only_en = _metrics(tmp_path / "en.jsonl", {5: {"en": 90.0}})
    with pytest.raises(ValueError, match=r"run full: no evaluation set\(s\) \['ko'\]"):
        write_report(base, {"full": only_en}, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="missing.jsonl does not exist"):
        write_report(base, {"full": str(tmp_path / "missing.jsonl")}, tmp_path / "out")


def test_base_from_a_runs_iteration_zero(tmp_path: Path) -> None:
    """A converted base has no run of its own: its numbers are a run's before-training evaluation."""
    run = _metrics(tmp_path / "p.jsonl", {0: {"en": 100.0, "ko": 1000.0}, 20: {"en": 110.0, "ko": 200.0}})
    res = write_report(run, {"scale-preserve": run}, tmp_path / "out", base_iteration=0)
    assert res["base"]["iteration"] == 0 and res["base"]["ppl"] == {"en": 100.0, "ko": 1000.0}
    assert res["runs"][0]["iteration"] == 20
    with pytest.raises(ValueError, match=r"no evaluation at iteration 5 \(evaluated at \[0, 20\]\)"):
        write_report(run, {"scale-preserve": run}, tmp_path / "out", base_iteration=5)

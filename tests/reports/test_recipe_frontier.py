"""The real model's frontier (reports/recipe_frontier.py, tools/recipe_frontier.py) on hand-made recipe
outputs whose scores are worked out by hand."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_scale.reports.recipe_frontier import Spec, runs_of, scores, sweep_curves, training_curve

ROOT = Path(__file__).resolve().parents[2]


def _metrics(path: Path, evals: dict[int, dict[str, float]], start: dict | None = None) -> None:
    """A run's metrics.jsonl: its start record (training/loop.py writes one; reach reads its tokens per
    iteration), one training record, the evaluations."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"kind": "start", "iteration": 0, "global_batch_size": 2, "seq_length": 256, **(start or {})},
             {"kind": "train", "iteration": 1, "lm_loss": 9.0}]
    for it, losses in evals.items():
        lines += [{"kind": f"eval/{name}", "iteration": it, "lm_loss": loss, "ppl": math.exp(loss)}
                  for name, loss in losses.items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def _workdir(root: Path) -> Path:
    # full: Korean loss 2.0 -> 1.5 -> 1.0 while English 4.0 -> 5.0 -> 8.0; Preserve keeps English
    _metrics(root / "runs" / "full" / "metrics.jsonl",
             {0: {"en": 4.0, "ko": 2.0, "en_modern": 3.0}, 8: {"en": 5.0, "ko": 1.5, "en_modern": 3.3},
              16: {"en": 8.0, "ko": 1.0, "en_modern": 6.0}})
    _metrics(root / "runs" / "scale-preserve" / "metrics.jsonl",
             {0: {"en": 4.0, "ko": 2.0, "en_modern": 3.0}, 16: {"en": 4.0, "ko": 1.7, "en_modern": 3.0}})
    sweep = {"old": "en", "new": "ko", "metric": "ppl",
             "heads": {"en": {"z_p": math.exp(4.0), "z_a": math.exp(5.0)}, "ko": {"z_p": math.exp(2.0), "z_a": math.exp(1.0)}},
             "statistics": {"cosine": {"calibration": {"tau": 0.5}, "points": [{"tau": 0.1, "en": math.exp(5.0), "ko": math.exp(1.0)},
                                                  {"tau": 0.5, "en": math.exp(4.0), "ko": math.exp(1.6)},
                                                  {"tau": 0.9, "en": math.exp(4.0), "ko": math.exp(2.0)}]}}}
    (root / "runs" / "scale-route" / "sweep").mkdir(parents=True)
    (root / "runs" / "scale-route" / "sweep" / "sweep.json").write_text(json.dumps(sweep))
    _metrics(root / "runs" / "scale-route" / "metrics.jsonl",
             {0: {"en": 4.0, "ko": 2.0, "en_modern": 3.0}, 16: {"en": 4.0, "ko": 2.0, "en_modern": 3.0}})
    return root


def test_scores_are_ratios_of_bits_per_byte_against_the_base(tmp_path: Path) -> None:
    assert scores(4.0, 2.0, 4.0, 2.0) == (0.0, 1.0)  # the base itself
    # Korean at half the base's bits per byte, English at twice: learning 0.5, retention 0.5
    assert scores(8.0, 1.0, 4.0, 2.0) == (0.5, 0.5)
    root = _workdir(tmp_path)
    curve = training_curve(root / "runs" / "full" / "metrics.jsonl", "en", "ko")
    assert [v for p in curve for v in p] == pytest.approx([0.0, 1.0, 0.25, 0.8, 0.5, 0.5])
    # the router sweep is scored against z_p on its own windows: tau 0.1 is z_a everywhere
    (route,) = sweep_curves(root / "runs" / "scale-route" / "sweep" / "sweep.json", "scale-route", 1e-3, "en", "ko")
    assert route.method == "scale-route[cosine]" and route.lr == 1e-3
    assert [v for p in route.curve for v in p] == pytest.approx([0.5, 0.8, 0.2, 1.0, 0.0, 1.0])
    runs = runs_of([Spec.parse(f"{root}:full:1e-3"), Spec.parse(f"{root}:scale-route:1e-3")])
    assert [r.method for r in runs] == ["full", "scale-route", "scale-route[cosine]"]


def test_bad_runs_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"expected \[NAME=\]WORKDIR:METHOD:LR"):
        Spec.parse("runs/x:full")
    with pytest.raises(ValueError, match="NAME without"):
        Spec.parse("full[x]=runs/x:full:1e-3")
    assert Spec.parse("slow-out=runs/x:scale-preserve:3e-3") == Spec(Path("runs/x"), "scale-preserve", 3e-3, "slow-out")
    with pytest.raises(ValueError, match="the LR 'fast' is not a number"):
        Spec.parse("runs/x:full:fast")
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        runs_of([Spec.parse(f"{tmp_path}:full:1e-3")])
    other = _workdir(tmp_path / "wd") / "runs" / "scale-route" / "sweep" / "sweep.json"
    with pytest.raises(ValueError, match="swept 'en' against 'ko'"):  # a sweep of other sets than the frontier's
        sweep_curves(other, "scale-route", 1e-3, "en_modern", "ko")
    _metrics(tmp_path / "m.jsonl", {4: {"en": 4.0, "ko": 2.0}})
    with pytest.raises(ValueError, match="no iteration-0 evaluation"):
        training_curve(tmp_path / "m.jsonl", "en", "ko")
    _metrics(tmp_path / "m.jsonl", {0: {"en": 4.0, "ko": 2.0}, 4: {"en": 4.0}})
    with pytest.raises(ValueError, match="iteration 4 has no evaluation of ko"):
        training_curve(tmp_path / "m.jsonl", "en", "ko")


def test_the_tool_writes_the_table_the_plot_and_every_runs_last_evaluation(tmp_path: Path) -> None:
    root = _workdir(tmp_path / "wd")
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "tools" / "recipe_frontier.py"), "--out", str(out),
           f"{root}:full:1e-3", f"{root}:scale-preserve:1e-3", f"{root}:scale-route:1e-3",
           f"again={root}:scale-preserve:1e-3", "--levels", "0.1", "0.4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (out / "frontier.md").read_text()
    # full at learning 0.1: 0.4 of the way from (0, 1) to (0.25, 0.8) -> 0.92; at 0.4: 0.8 - 0.3 * 0.6 = 0.62
    assert "| full | 1 | 0.920 | 0.620 |" in table, table
    assert "| scale-preserve | 1 | 1.000 | not reached |" in table, table  # learns 0.15 (2.0 -> 1.7), keeps English
    # Route's cosine sweep in tau order (0.5, 0.8), (0.2, 1.0), (0, 1): 1.0 at 0.1; at 0.4,
    # 0.8 + 0.2 * (0.1 / 0.3)
    assert "| scale-route[cosine] | 1 | 1.000 | 0.867 |" in table, table
    final = (out / "final.md").read_text()
    assert "| full | 0.001 | 16 | +100.0% | +100.0% | -50.0% |" in final.replace(" |  |", " |"), final
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "frontier.json").read_text())
    assert [s["method"] for s in doc["specs"]] == ["full", "scale-preserve", "scale-route", "scale-preserve"]
    assert "| again | 1 | 1.000 | not reached |" in table and "| again | 0.001 | 16 |" in final  # a named variant
    bad = subprocess.run([*cmd[:4], f"{root}:lora:1e-3"], capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "no metrics file" in bad.stderr and "lora" in bad.stderr


def test_a_sweep_of_one_english_set_stands_only_on_its_own_axis(tmp_path: Path) -> None:
    """The GPU science run's frontier (several English sets, so a by_set/ axis per set) with Route's
    sweep of `en` alone: the sweep's curves are drawn on the en axis and left out of en_modern's,
    instead of refusing the whole frontier (the CPU rehearsal of 2026-12-03 stopped there)."""
    root = _workdir(tmp_path / "wd")
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "tools" / "recipe_frontier.py"), "--out", str(out), "--levels", "0.1",
           "--old", "en", "en_modern", "--", f"{root}:full:1e-3", f"{root}:scale-route:1e-3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scale-route[cosine]" in (out / "by_set" / "en" / "frontier.md").read_text()
    modern = (out / "by_set" / "en_modern" / "frontier.md").read_text()
    assert "| full |" in modern and "scale-route[" not in modern
    assert "scale-route[" not in (out / "frontier.md").read_text()  # the mean of two sets: no sweep scores it
    runs = runs_of([Spec.parse(f"{root}:scale-route:1e-3")], "en_modern", "ko")
    assert [r.method for r in runs] == ["scale-route"]


def test_sweep_extras_give_the_controls_the_papers_router_and_the_deployable_point(tmp_path: Path) -> None:
    from megatron_scale.reports.recipe_frontier import sweep_extras

    path = _workdir(tmp_path) / "runs" / "scale-route" / "sweep" / "sweep.json"
    runs, markers, info = sweep_extras(path, "scale-route", 1e-3, "en", "ko", rates=(0.0, 0.5, 1.0))
    (random,) = runs  # an old sweep: random mixing from the heads' mean losses alone
    # f = 0.5: English loss (4 + 5) / 2 -> retention 4 / 4.5; Korean (2 + 1) / 2 -> learning 0.25
    assert random.method == "scale-route[random mix]"
    assert [v for p in random.curve for v in p] == pytest.approx([0.0, 1.0, 0.25, 4 / 4.5, 0.5, 0.8])
    assert markers == [] and info["scale-route[cosine]"]["direction"] == "above" and info["scale-route[cosine]"]["unit"] == "token"
    doc = json.loads(path.read_text())
    cos = doc["statistics"]["cosine"]
    cos["direction"], cos["paper_points"] = "below", [{"en": math.exp(4.0), "ko": math.exp(2.0)}]
    cos["calibration"].update({"held_out": True, "en": math.exp(4.4), "ko": math.exp(1.5), "direction": "below"})
    doc["controls"] = {"alpha": [{"alpha": 0.5, "en": math.exp(4.2), "ko": math.exp(1.2)}]}
    doc["unit"] = "char"
    path.write_text(json.dumps(doc))
    runs, markers, info = sweep_extras(path, "scale-route", 1e-3, "en", "ko")
    assert [r.method for r in runs] == ["scale-route[cosine, paper's]", "scale-route[random mix]", "scale-route[alpha mix]"]
    assert runs[2].curve[0] == pytest.approx((0.4, 4 / 4.2))
    (m,) = markers  # the held-out tau: learning 0.25, retention 4 / 4.4, beside the cosine sweep
    assert m.name == "scale-route[cosine, deployable]" and m.envelope == "scale-route[cosine]"
    assert m.point == pytest.approx((0.25, 4 / 4.4))
    assert info["scale-route[cosine]"] == {"statistic": "cosine", "direction": "below", "unit": "char",
                                           "tau": "every tau, read off the evaluated windows"}


def _tool():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tool_recipe_frontier", ROOT / "tools" / "recipe_frontier.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def _seeded(root: Path, method: str, seed: int, evals: dict[int, dict[str, float]], eval_seed: int = 1234) -> Path:
    path = root / "runs" / f"{method}-seed{seed}" / "metrics.jsonl"
    _metrics(path, evals, start={"seed": seed, "eval_seed": eval_seed})
    return path


def test_seeds_english_sets_a_second_korean_axis_and_route_from_preserves_records(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 44's SmolLM2 frontier: two seeds per method, retention the mean of two English sets,
    NSMC (ko) and legal Korean (ko_legal) as two learning axes, Preserve - full paired per seed,
    and Route's rows from the route records of a Preserve checkpoint."""
    import torch

    from megatron_scale.route_eval import stored
    from tests.route_eval.test_stored import META, _set

    base = {"en": 4.0, "en_modern": 2.0, "ko": 2.0, "ko_legal": 3.0}
    # Korean learning 0.04, 0.07, 0.11 on both axes at iterations 1, 2, 3 (every gap under 0.05)
    ko = [{"ko": 2.0 * (1 - x), "ko_legal": 3.0 * (1 - x)} for x in (0.04, 0.07, 0.11)]

    def english(*ratios: float) -> dict[int, dict[str, float]]:  # each English set's loss over the base's
        return {0: base} | {i + 1: {"en": 4.0 * r, "en_modern": 2.0 * r, **ko[i]} for i, r in enumerate(ratios)}

    root = tmp_path / "wd"
    shared = _seeded(root, "full", 1, english(1.025, 1.05, 1.1))  # forgets from the first step
    # forgets late; it skipped its iteration-0 evaluation: seed 1's (the same windows) stands in
    _seeded(root, "full", 2, {it: v for it, v in english(1.0, 1.0, 1.1).items() if it})
    preserve = english(1.0, 1.025, 1.05)
    _seeded(root, "scale-preserve", 2, preserve)
    # seed 1 did not evaluate at iteration 2: its route records there give it (z_p the base, z_a
    # the model), on the same windows; English sits high on every router statistic, Korean low
    _seeded(root, "scale-preserve", 1, {it: v for it, v in preserve.items() if it != 2})
    rec = {name: _set(base[name], preserve[2][name], 0.1 if name.startswith("ko") else 0.9, {0.0: base[name]})
           for name in base}
    rec |= {"cal/en": _set(4.0, 4.1, 0.9, {}), "cal/ko": _set(2.0, 1.86, 0.1, {})}
    records = root / "runs" / "scale-preserve-seed1" / "route_records"
    records.mkdir()
    stored.save(records / "iter_0000002.safetensors", rec, META)
    out = tmp_path / "out"
    tool = _tool()  # in this process: the import is paid once
    assert tool.main(["--out", str(out), "--base-metrics", str(shared), "--old", "en", "en_modern", "--new", "ko",
                      "--also-new", "ko_legal",
                      "--levels", "0.05", "0.1", "--route-units", "token", "--pair", "scale-preserve", "full",
                      *(f"{root}:{m}:1e-3:{s}" for m in ("full", "scale-preserve") for s in (1, 2))]) == 0

    def at(r: tuple[float, ...], level: float) -> float:  # retention along (0.04, 0.07, 0.11), linear
        i = 0 if level < 0.07 else 1
        lo, hi = (0.04, 0.07, 0.11)[i:i + 2]
        return 1 / r[i] + (1 / r[i + 1] - 1 / r[i]) * (level - lo) / (hi - lo)

    f1, f2, p = (1.025, 1.05, 1.1), (1.0, 1.0, 1.1), (1.0, 1.025, 1.05)
    table = (out / "frontier.md").read_text()
    for name, r1, r2 in (("full", f1, f2), ("scale-preserve", p, p)):
        cells = " | ".join(f"{(at(r1, lv) + at(r2, lv)) / 2:.3f} [{min(at(r1, lv), at(r2, lv)):.3f}, "
                           f"{max(at(r1, lv), at(r2, lv)):.3f}]" for lv in (0.05, 0.1))
        assert f"| {name} | 2 | {cells} |" in table, (cells, table)
    d1, d2 = at(p, 0.05) - at(f1, 0.05), at(p, 0.05) - at(f2, 0.05)  # Preserve - full, per seed
    assert f"| scale-preserve - full | {(d1 + d2) / 2:+.3f} [{min(d1, d2):+.3f}, {max(d1, d2):+.3f}]" in table, table
    # Route from seed 1's Preserve checkpoint: the paper's router keeps English and learns 0.07
    # there, a chord from (0, 1) at iteration 0 (no checkpoint evaluated in between)
    assert "| scale-route[paper: cosine>=0.5, token] | 1 | ~1.000 (~1/1) | not reached |" in table, table
    # random mixing at rate f learns 0.07 f and keeps 1 / (1 + 0.025 f) of English: at 0.05, f = 5/7
    assert f"| control[random mixing] | 1 | {1 / (1 + 0.025 * 5 / 7):.3f} | not reached |" in table, table
    legal = (out / "ko_legal" / "frontier.md").read_text()  # the same learning on legal Korean
    assert f"| scale-preserve | 2 | {at(p, 0.05):.3f} [{at(p, 0.05):.3f}, {at(p, 0.05):.3f}]" in legal, legal
    assert (out / "by_set" / "en" / "frontier.md").is_file() and (out / "by_set" / "en_modern" / "frontier.png").is_file()
    best = (out / "best_lr.md").read_text()
    assert f"| full | 1 | 0.001 | 0.001: {at(f1, 0.05):.3f} | 0.001: {at(f1, 0.1):.3f} |" in best, best
    (ckpt,) = json.loads((out / "route_detail.json").read_text())[0]["checkpoints"]
    router = next(r for r in ckpt["routers"] if r["statistic"] == "cosine")
    assert (ckpt["iteration"], router["unit"], router["direction"], router["tau"]) == (2, "token", "above", pytest.approx(0.9))
    # a base that evaluated other windows (another --eval-seed) cannot stand in
    other = _seeded(tmp_path / "other", "full", 1, english(1.0, 1.0, 1.0), eval_seed=7)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        tool.main([f"{root}:full:1e-3:2", "--out", str(tmp_path / "bad"), "--base-metrics", str(other)])
    assert "do not score the same windows (differing: eval_seed)" in capsys.readouterr().err
    # records that score other windows than the run's evaluation are refused
    rec["en"]["loss_p"] = torch.full_like(rec["en"]["loss_p"], 4.5)
    stored.save(records / "iter_0000002.safetensors", rec, META)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        tool.main([f"{root}:scale-preserve:1e-3:1", "--out", str(tmp_path / "bad"), "--old", "en", "en_modern",
                   "--route-units", "token", "--base-metrics", str(shared)])
    assert "score other windows than the run evaluated" in capsys.readouterr().err
    final = (out / "final.md").read_text()
    assert "| full | 0.001 | 1 | 3 | +10.0% | +10.0% | -11.0% |" in final.replace(" |  |", " |"), final


def test_prior_curves_stand_beside_new_runs_in_every_table(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """--prior: an earlier frontier's curves (its WORKDIRs gone) join new runs' in the main table
    and in each by_set table, each from its own sub-folder; a run in both, or another axis, is an error."""
    root = _workdir(tmp_path / "wd")
    tool = _tool()
    first, second = tmp_path / "first", tmp_path / "second"
    old = ["--levels", "0.1", "0.4", "--old", "en", "en_modern", "--"]
    assert tool.main(["--out", str(first), *old, f"{root}:full:1e-3"]) == 0
    assert tool.main(["--out", str(second), "--prior", str(first), *old, f"{root}:scale-preserve:1e-3"]) == 0
    for rel in (".", "by_set/en", "by_set/en_modern"):
        one, two = (json.loads((f / rel / "frontier.json").read_text()) for f in (first, second))
        assert [r for r in two["runs"] if r["method"] == "full"] == one["runs"]  # the earlier curve, as it was
        assert sorted(r["method"] for r in two["runs"]) == ["full", "scale-preserve"]
        assert two["summary"]["full"] == one["summary"]["full"]  # its cells recompute from the curve alone
    assert json.loads((second / "frontier.json").read_text())["prior"] == str(first)
    with pytest.raises(SystemExit):  # full given again beside the prior that holds it
        tool.main(["--out", str(tmp_path / "x"), "--prior", str(first), *old, f"{root}:full:1e-3"])
    assert "holds runs given again: [('full', 0.001, " in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the earlier frontier's retention is not English alone
        tool.main(["--out", str(tmp_path / "y"), "--prior", str(first), "--levels", "0.1", "--", f"{root}:scale-preserve:1e-3"])
    assert "its axis is old ['en', 'en_modern'] / new ko, not old ['en'] / new ko" in capsys.readouterr().err


def test_prior_runs_name_a_missing_folder(tmp_path: Path) -> None:
    from megatron_scale.reports.recipe_frontier import Axis, prior_runs

    with pytest.raises(FileNotFoundError, match=r"--prior .*nowhere: no .*frontier\.json"):
        prior_runs(tmp_path / "nowhere", ".", Axis.of("en", "ko"))

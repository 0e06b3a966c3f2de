"""megatron_scale.reports.recipe: the recipe's table, checks and plot from metrics JSONL files
(the last evaluation of each run against the base's)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from megatron_scale.reports.recipe import curve, write_report


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


def _records(seed: int, n: int, prob: tuple[float, float], loss_p: float, loss_a: float) -> dict:
    """Per-token records as route_eval.collect makes them: max-prob uniform in `prob`, the cosine
    uniform in [0, 1] (no information), constant losses per head."""
    import torch

    g = torch.Generator().manual_seed(seed)
    lo, hi = prob
    return {"stat/max-prob": lo + (hi - lo) * torch.rand(n, generator=g), "stat/cosine": torch.rand(n, generator=g),
            "loss_p": torch.full((n,), loss_p), "loss_a": torch.full((n,), loss_a),
            "correct_p": torch.zeros(n), "correct_a": torch.zeros(n)}


def _sweep(path: Path, old: str = "en", new: str = "ko", with_plot: bool = True) -> Path:
    """A sweep.json and sweep.png as tools/route_sweep.py writes them (route_eval's own analysis,
    JSON and plot): English sure under z_p (max-prob in [0.5, 1]), Korean not ([0, 0.4]);
    tau calibrated on other records from the same distributions."""
    from megatron_scale.route_eval.analysis import analyse
    from megatron_scale.route_eval.report import plot, write_json

    en, ko = _records(1, 400, (0.5, 1.0), 2.0, 4.0), _records(2, 400, (0.0, 0.4), 8.0, 3.0)
    cal = (_records(3, 400, (0.5, 1.0), 2.0, 4.0), _records(4, 400, (0.0, 0.4), 8.0, 3.0))
    res = analyse((old, en), (new, ko), ("cosine", "max-prob"), "ppl", keep_old=0.95, min_new_adapt=0.5,
                  calibration_sets=cal)
    res["settings"] = {"load": "runs/scale-route/iter_0000100", "keep_old": 0.95, "min_new_adapt": 0.5,
                       "calibration_old": "en_valid", "calibration_new": "ko_valid", "calibration_skip": 32}
    path.mkdir(parents=True)
    write_json(str(path / "sweep.json"), res)
    if with_plot:
        plot(res, str(path / "sweep.png"))
    return path / "sweep.json"


def test_route_sweep_section(tmp_path: Path) -> None:
    """The report's SCALE-Route section: per statistic its AUC and the calibrated tau's shares and
    perplexities on the evaluated windows, z_p and z_a alone; the plot beside report.md."""
    base = _metrics(tmp_path / "base.jsonl", {300: {"en": 100.0, "ko": 1000.0}})
    route = _metrics(tmp_path / "r.jsonl", {20: {"en": 101.0, "ko": 300.0}}, route=0.75)
    res = write_report(base, {"scale-route": route}, tmp_path / "out", route_sweep=_sweep(tmp_path / "sweep"))
    sw = res["route_sweep"]
    mp, cos = sw["statistics"]["max-prob"], sw["statistics"]["cosine"]
    assert mp["auc"] == 1.0 and 0.4 < cos["auc"] < 0.6  # separable vs uninformative
    # max-prob: every Korean token to z_a (ko PPL = e^3, z_a's), ~95% of English kept on z_p
    assert mp["ko_to_z_a"] == 1.0 and mp["ko_ppl"] == pytest.approx(math.exp(3.0))
    assert 0.9 < mp["en_kept"] < 1.0 and mp["calibration_en_kept"] >= 0.95 and mp["reachable"] and mp["held_out"]
    assert mp["en_ppl"] == pytest.approx(math.exp(2.0 * mp["en_kept"] + 4.0 * (1 - mp["en_kept"])))
    # the cosine keeps 95% of English only by keeping ~95% of Korean too: its Korean target fails
    assert cos["ko_to_z_a"] < 0.2 and not cos["reachable"]
    assert sw["heads"]["en"] == {"z_p": pytest.approx(math.exp(2.0)), "z_a": pytest.approx(math.exp(4.0))}
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.startswith(res["table"]) and "## SCALE-Route: every tau from one pass" in md
    assert "chosen on windows 32 onwards of en_valid and ko_valid, held out from the evaluated ones" in md
    assert mp["direction"] == "above"
    assert (f"| max-prob | max-prob >= tau | 1.000 | {mp['tau']:.4g} | {mp['en_kept']:.3f} | 1.000 | {mp['en_ppl']:.2f} "
            f"| {math.exp(3.0):.2f} |") in md
    where = f"cosine {'>=' if cos['direction'] == 'above' else '<='} tau"
    assert f"| cosine | {where} | {cos['auc']:.3f} | {cos['tau']:.4g} (ko target not reached) |" in md
    assert f"| z_a alone | | | | 0.000 | 1.000 | {math.exp(4.0):.2f} | {math.exp(3.0):.2f} |" in md
    assert "![every tau of each router statistic, and its ROC](route_sweep.png)" in md
    assert (tmp_path / "out" / "route_sweep.png").read_bytes() == (tmp_path / "sweep" / "sweep.png").read_bytes()
    assert "SCALE-Route's row is its training-time evaluation, with the router it was upscaled with" in md
    assert "The calibrated checkpoint" not in md  # this sweep saved none
    # a sweep that saved its calibrated router (--save) names it, its statistic, unit and tau
    saved = tmp_path / "saved"
    sweep = _sweep(saved)
    got = json.loads(sweep.read_text())
    got["saved"], got["settings"]["calibrate_with"] = "ckpt/calibrated", "max-prob"
    sweep.write_text(json.dumps(got))
    md = write_report(base, {"scale-route": route}, tmp_path / "out2", route_sweep=sweep)["route_sweep"]["section"]
    assert (f"The calibrated checkpoint `ckpt/calibrated` routes by max-prob per token (max-prob >= {mp['tau']:.6g} "
            "keeps z_p): the benchmarks and the Hugging Face export of SCALE-Route use it.") in md
    assert json.loads((tmp_path / "out" / "results.json").read_text())["route_sweep"]["statistics"] == sw["statistics"]


def test_route_sweep_of_other_sets_or_uncalibrated_is_refused(tmp_path: Path) -> None:
    base = _metrics(tmp_path / "base.jsonl", {300: {"en": 100.0, "ko": 1000.0}})
    route = _metrics(tmp_path / "r.jsonl", {20: {"en": 101.0, "ko": 300.0}})
    other = _sweep(tmp_path / "de", old="en", new="de", with_plot=False)
    with pytest.raises(ValueError, match=r"--route-sweep .*swept 'en' against 'de', the report compares 'en' against 'ko'"):
        write_report(base, {"scale-route": route}, tmp_path / "out", route_sweep=other)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"old": "en", "new": "ko", "statistics": {"cosine": {"auc": 0.5}}}))
    with pytest.raises(ValueError, match=r"no calibrated tau for \['cosine'\] \(sweep with --keep-old\)"):
        write_report(base, {"scale-route": route}, tmp_path / "out", route_sweep=bare)
    with pytest.raises(FileNotFoundError, match="--route-sweep .*missing.json: no such file"):
        write_report(base, {"scale-route": route}, tmp_path / "out", route_sweep=tmp_path / "missing.json")


def test_route_sweep_section_reads_a_reversed_router_below(tmp_path: Path) -> None:
    """A statistic lower on English than on Korean (issue 35's cosine): the calibration keeps z_p
    where it is <= tau, the section says so and gives the AUC in that direction (1.0, not 0.0);
    a sweep.json written before directions existed reads as above."""
    from megatron_scale.route_eval.analysis import analyse
    from megatron_scale.route_eval.report import write_json

    base = _metrics(tmp_path / "base.jsonl", {300: {"en": 100.0, "ko": 1000.0}})
    route = _metrics(tmp_path / "r.jsonl", {20: {"en": 101.0, "ko": 300.0}}, route=0.75)
    en, ko = _records(1, 400, (0.0, 0.4), 2.0, 4.0), _records(2, 400, (0.5, 1.0), 8.0, 3.0)
    res = analyse(("en", en), ("ko", ko), ("max-prob",), "ppl", keep_old=0.95, min_new_adapt=0.5)
    res["settings"] = {"load": "ckpt", "keep_old": 0.95, "min_new_adapt": 0.5}
    (tmp_path / "sweep").mkdir()
    write_json(str(tmp_path / "sweep" / "sweep.json"), res)
    sw = write_report(base, {"scale-route": route}, tmp_path / "out", route_sweep=tmp_path / "sweep" / "sweep.json")
    mp = sw["route_sweep"]["statistics"]["max-prob"]
    assert (mp["direction"], mp["auc"], mp["auc_above"], mp["ko_to_z_a"], mp["reachable"]) == ("below", 1.0, 0.0, 1.0, True)
    assert f"| max-prob | max-prob <= tau | 1.000 | {mp['tau']:.4g} |" in (tmp_path / "out" / "report.md").read_text()
    for r in (res["statistics"]["max-prob"], res["statistics"]["max-prob"]["calibration"]):
        r.pop("direction")
    res["statistics"]["max-prob"].pop("auc_by_direction")
    write_json(str(tmp_path / "sweep" / "sweep.json"), res)
    sw = write_report(base, {"scale-route": route}, tmp_path / "out2", route_sweep=tmp_path / "sweep" / "sweep.json")
    assert sw["route_sweep"]["statistics"]["max-prob"]["direction"] == "above"


def _sizes(path: Path, **sets: tuple[int, int]) -> Path:
    """tools/text_bytes.py's JSON: tokens and bytes per set."""
    path.write_text(json.dumps({"tokenizer": "tok", "sets": {
        n: {"prefix": f"data/{n}", "documents": 3, "tokens": t, "bytes": b, "chars": b} for n, (t, b) in sets.items()}}))
    return path


def test_bits_per_byte_beside_every_perplexity_and_in_the_curves(tmp_path: Path) -> None:
    """bpb = lm_loss / ln 2 * tokens / bytes of the set: Korean at 1 token per 3 bytes (a
    tokenizer that knows Hangul) and English at 1 per 4; the curves gain a bpb row."""
    base = _metrics(tmp_path / "base.jsonl", {0: {"en": 100.0, "ko": 1000.0}})
    runs = {"full": _metrics(tmp_path / "f.jsonl", {0: {"en": 100.0, "ko": 1000.0}, 10: {"en": 120.0, "ko": 50.0}})}
    sizes = _sizes(tmp_path / "bytes.json", en=(1000, 4000), ko=(1000, 3000))
    res = write_report(base, runs, tmp_path / "out", text_bytes=sizes)
    bpb = lambda ppl, ratio: math.log(ppl) / math.log(2) * ratio  # noqa: E731
    assert res["base"]["bpb"] == pytest.approx({"en": bpb(100, 1 / 4), "ko": bpb(1000, 1 / 3)})
    assert res["runs"][0]["bpb"] == pytest.approx({"en": bpb(120, 1 / 4), "ko": bpb(50, 1 / 3)})
    lines = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert lines[0].startswith("| method | en PPL (forgetting) | en bpb | en change | ko PPL (learning) | ko bpb | ko change |")
    assert f"| full fine-tuning | 120.00 | {bpb(120, 1 / 4):.3f} | +20.0% | 50.00 | {bpb(50, 1 / 3):.3f} | -95.0% |  |" in lines
    assert f"| base (iteration 0) | 100.00 | {bpb(100, 1 / 4):.3f} |  | 1000.00 | {bpb(1000, 1 / 3):.3f} |  |  |" in lines
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    points = curve(runs["full"], "ko", {"ko": {"tokens": 1000, "bytes": 3000}})
    assert [p[0] for p in points] == [0, 10]
    assert [p[1] for p in points] == pytest.approx([bpb(1000, 1 / 3), bpb(50, 1 / 3)])
    without = tmp_path / "plain"
    write_report(base, runs, without)
    assert (tmp_path / "out" / "perplexity.png").stat().st_size > (without / "perplexity.png").stat().st_size
    with pytest.raises(ValueError, match=r"bytes.json: no set\(s\) \['ko'\]"):
        write_report(base, runs, tmp_path / "out", text_bytes=_sizes(tmp_path / "bytes.json", en=(1, 4)))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="--text-bytes .*bad.json: not tools/text_bytes.py's output"):
        write_report(base, runs, tmp_path / "out", text_bytes=tmp_path / "bad.json")


def _bench(path: Path, **tasks: list[int]) -> str:
    """tools/eval_benchmarks.py's JSON: per task, each document right (1) or wrong (0); hellaswag
    reports acc_norm (right/wrong as given, acc the opposite), winogrande acc only."""
    from megatron_scale.evaluation.scoring import mean_stderr

    results = {}
    for task, right in tasks.items():
        norm = task != "winogrande"
        items = [{"doc_id": str(i), "acc": float(1 - r if norm else r), "acc_norm": float(r), "lls": [0.0, -1.0]}
                 for i, r in enumerate(right)]
        acc = mean_stderr([i["acc"] for i in items])
        r = {"acc": acc[0], "acc_stderr": acc[1], "n": len(items), "n_total": 100, "seed": 7, "num_fewshot": 0,
             "per_item": items}
        if norm:
            r["acc_norm"], r["acc_norm_stderr"] = mean_stderr([i["acc_norm"] for i in items])
        results[task] = r
    path.write_text(json.dumps({"checkpoint": "ckpt", "limit": len(right), "results": results}))
    return str(path)


def test_benchmark_accuracy_before_and_after(tmp_path: Path) -> None:
    """acc_norm where reported, else acc, ± standard error; the change is paired over documents."""
    base = _metrics(tmp_path / "base.jsonl", {0: {"en": 100.0, "ko": 1000.0}})
    runs = {"full": _metrics(tmp_path / "f.jsonl", {10: {"en": 120.0, "ko": 50.0}}),
            "scale-preserve": _metrics(tmp_path / "p.jsonl", {10: {"en": 101.0, "ko": 60.0}})}
    before = [1, 1, 1, 0, 0, 1, 0, 1]
    bench = {"base": _bench(tmp_path / "b.json", hellaswag=before, winogrande=before),
             "full": _bench(tmp_path / "fb.json", hellaswag=[0, 0, 1, 0, 0, 1, 0, 0], winogrande=before),
             "scale-preserve": _bench(tmp_path / "pb.json", hellaswag=[1, 1, 1, 0, 1, 1, 0, 1], winogrande=before)}
    res = write_report(base, runs, tmp_path / "out", benchmarks=bench)
    nums = res["benchmarks"]["numbers"]
    assert nums["base"]["hellaswag"]["metric"] == "acc_norm" and nums["base"]["winogrande"]["metric"] == "acc"
    assert nums["base"]["hellaswag"]["value"] == 5 / 8 and "change" not in nums["base"]["hellaswag"]
    full = nums["full"]["hellaswag"]
    diffs = [-1, -1, 0, 0, 0, 0, 0, -1]  # three documents lost
    sd = math.sqrt(sum((d + 3 / 8) ** 2 for d in diffs) / 7)
    assert full["change"] == pytest.approx(-3 / 8) and full["change_stderr"] == pytest.approx(sd / math.sqrt(8))
    assert nums["scale-preserve"]["hellaswag"]["change"] == pytest.approx(1 / 8)
    assert nums["full"]["winogrande"]["change"] == 0.0 and nums["full"]["winogrande"]["change_stderr"] == 0.0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| model | hellaswag acc_norm (%) | hellaswag change (points) | winogrande acc (%) | winogrande change (points) |" in md
    assert f"| full fine-tuning | 25.0 ± 16.4 | -37.5 ± {100 * sd / math.sqrt(8):.1f} | 62.5 ± 18.3 | +0.0 ± 0.0 |" in md
    assert "documents per task: hellaswag 8, winogrande 8, seed 7" in md
    # a model scored on other documents, a missing base, a file that is not the tool's output
    other = _bench(tmp_path / "o.json", hellaswag=before[:6], winogrande=before[:6])
    with pytest.raises(ValueError, match="o.json, hellaswag: scored other documents than the base"):
        write_report(base, runs, tmp_path / "out", benchmarks={**bench, "full": other})
    with pytest.raises(ValueError, match="no base=FILE"):
        write_report(base, runs, tmp_path / "out", benchmarks={"full": bench["full"]})
    (tmp_path / "x.json").write_text(json.dumps({"results": {"hellaswag": {"per_item": []}}}))
    with pytest.raises(ValueError, match="x.json: not tools/eval_benchmarks.py's output"):
        write_report(base, runs, tmp_path / "out", benchmarks={**bench, "full": str(tmp_path / "x.json")})

"""NSMC in the Korean recipe, without training: examples/configs/smollm2-nsmc.env's settings and
steps (NSMC's training and held-out text tokenised as the Korean sets, the demo's legal Korean as
a second new-language set through NEW_EVAL, the nsmc benchmark beside ARC-Easy with NSMC_DIR
exported to the steps), and the report's learning columns for several new-language sets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import Command, Key, actions
from megatron_scale.reports.recipe import write_report
from tests.recipe._env import REPO, sourced_env


def test_the_nsmc_config_trains_on_nsmc_and_reads_it_as_new_language(tmp_path: Path) -> None:
    nsmc = tmp_path / "nsmc"
    env = sourced_env("examples/configs/smollm2-nsmc.env", WORKDIR=str(tmp_path), NSMC_DIR=str(nsmc))
    s = Settings.from_env(env, repo=REPO)
    raw = tmp_path / "data" / "demo_raw"
    assert env["NSMC_DIR"] == str(nsmc)  # exported (set -a): the benchmark steps' tools/eval_benchmarks.py read it
    assert (s.ko_train_input, s.ko_eval_input, s.en_eval_input) == (
        str(nsmc / "train.jsonl"), str(nsmc / "heldout.jsonl"), str(raw / "en_valid.jsonl"))
    assert s.new_eval == (f"ko_legal={raw / 'ko_valid.jsonl'}",) and len(s.extra_eval) == 2
    assert (s.methods, s.benchmarks, s.benchmark_limit, s.demo_model) == (("full",), "arc_easy,nsmc,nsmc_order", 0, True)
    got = [a.resolve() for a in actions(s)]
    cmds = [list(c.args) for c in got if isinstance(c, Command)]
    inputs = [c[c.index("--input") + 1] for c in cmds if c[0] == "tools/preprocess_data.py"]
    assert inputs == [str(nsmc / "train.jsonl"), str(nsmc / "heldout.jsonl"), str(raw / "en_valid.jsonl"),
                      str(raw / "en_modern_valid.jsonl"), str(raw / "en_passages_valid.jsonl"), str(raw / "ko_valid.jsonl")]
    (train,) = [c for c in got if isinstance(c, Command) and c.kind == "train"]
    evals = train.args[train.args.index("--eval-data-path") + 1:train.args.index("--eval-iters")]
    assert [e.split("=")[0] for e in evals] == ["en", "ko", "en_modern", "en_passages", "ko_legal"]
    bench = [c for c in cmds if c[0] == "tools/eval_benchmarks.py"]
    assert len(bench) == 2 and all(c[c.index("--tasks") + 1] == "arc_easy,nsmc,nsmc_order" and "--limit" not in c for c in bench)


def test_the_report_step_reads_new_eval_as_learning(tmp_path: Path) -> None:
    s = Settings.from_env({"WORKDIR": str(tmp_path), "HF_MODEL": "/m", "METHODS": "full", "EXPORT": "0",
                           "EXTRA_EVAL": "en_modern=/d/m.jsonl", "NEW_EVAL": "nsmc=/d/n.jsonl"})
    run = tmp_path / "runs" / "full"
    run.mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text(f"{s.train_iters}\n")
    (report,) = [a.resolve() for a in actions(s) if a.key == Key("report")]
    args = list(report.args)
    pairs = [(a, args[i + 1]) for i, a in enumerate(args) if a in ("--old", "--new")]
    assert pairs == [("--old", "en"), ("--old", "en_modern"), ("--new", "ko"), ("--new", "nsmc")]
    plain = Settings.from_env({"WORKDIR": str(tmp_path), "HF_MODEL": "/m", "METHODS": "full", "EXPORT": "0"})
    (report,) = [a.resolve() for a in actions(plain) if a.key == Key("report")]
    assert "--new" not in report.args  # without NEW_EVAL the report's command is as before
    for env, match in (({"NEW_EVAL": "nsmc=/a"}, "NEW_EVAL is for a Hugging Face base"),
                       ({"HF_MODEL": "/m", "NEW_EVAL": "nsmc=/a", "EXTRA_EVAL": "nsmc=/b"}, "name a set twice"),
                       ({"HF_MODEL": "/m", "NEW_EVAL": "ko=/a"}, "NEW_EVAL: 'ko=/a' is not NAME=RAW_INPUT")):
        with pytest.raises(SettingsError, match=match):
            Settings.from_env({"WORKDIR": str(tmp_path), **env})


def _metrics(path: Path, sets: dict[str, float]) -> str:
    path.write_text("".join(json.dumps({"kind": f"eval/{n}", "iteration": 8, "lm_loss": math.log(p), "ppl": p}) + "\n"
                            for n, p in sets.items()))
    return str(path)


def test_several_new_language_sets_are_learning_columns(tmp_path: Path) -> None:
    base = _metrics(tmp_path / "base.jsonl", {"en": 10.0, "ko": 100.0, "nsmc": 50.0})
    runs = {"full": _metrics(tmp_path / "f.jsonl", {"en": 11.0, "ko": 40.0, "nsmc": 45.0})}
    res = write_report(base, runs, tmp_path / "out", old=("en",), new=("ko", "nsmc"))
    lines = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert lines[0] == ("| method | en PPL (forgetting) | en change | ko PPL (learning) | ko change "
                        "| nsmc PPL (learning) | nsmc change | routed to preservation head (en / ko) |")
    assert "| full fine-tuning | 11.00 | +10.0% | 40.00 | -60.0% | 45.00 | -10.0% |  |" in lines
    assert res["checks"] == {"ko perplexity falls for full": True}  # the checks read the main new set
    with pytest.raises(ValueError, match=r"no evaluation set\(s\) \['nsmc'\]"):
        write_report(base, {"full": _metrics(tmp_path / "g.jsonl", {"en": 11.0, "ko": 40.0})}, tmp_path / "o2",
                     new=("ko", "nsmc"))

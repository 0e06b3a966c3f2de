"""megatron_scale.recipe.settings: where each setting comes from (default, config, environment),
what the shipped configs set, and the settings refused with the variable named."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import Command, actions
from tests.recipe._env import REPO, flag, made, resolved, settings, sourced_env, train_args


def test_defaults_are_the_tiny_demo(tmp_path: Path) -> None:
    s = Settings.from_env({}, repo=tmp_path)
    assert s.workdir == tmp_path / "runs" / "scale_korean" and s.data_dir == s.workdir / "data"
    assert s.from_scratch and s.methods == ("scale-preserve", "scale-adapt", "scale-route", "full")
    assert (s.tp, s.train_iters, s.eval_interval, s.export, s.verify_export) == (2, 100, 25, True, True)



def test_tiny_config_is_the_defaults(tmp_path: Path) -> None:
    """examples/configs/tiny-cpu.env writes the defaults out: sourced, it changes nothing."""
    sourced = Settings.from_env(sourced_env("examples/configs/tiny-cpu.env", WORKDIR=str(tmp_path)), repo=REPO)
    assert sourced == settings(tmp_path)



def test_the_script_defaults_to_the_smollm2_config() -> None:
    script = (REPO / "examples" / "scale_korean.sh").read_text()
    assert 'SCALE_CONFIG=${1:-${SCALE_CONFIG:-examples/configs/smollm2-cpu.env}}' in script



def test_environment_overrides_and_empty_means_unset(tmp_path: Path) -> None:
    s = settings(tmp_path, TRAIN_ITERS="40", TP="1", METHODS="full  lora", EXPORT="0", LR="", DATA_DIR="")
    assert (s.train_iters, s.tp, s.methods, s.export) == (40, 1, ("full", "lora"), False)
    assert s.eval_interval == 10  # EVAL_INTERVAL defaults to TRAIN_ITERS / 4
    assert s.lr == "3e-3" and s.data_dir == tmp_path / "data"  # bash ${VAR:=default}: empty is unset



def test_config_file_then_environment(tmp_path: Path) -> None:
    env = sourced_env("examples/configs/llama3.2-1b.env", TRAIN_ITERS="1000", WORKDIR=str(tmp_path))
    s = Settings.from_env(env, repo=REPO)
    assert s.hf_model == "/home/u/models/Llama-3.2-1B" and not s.from_scratch
    assert (s.train_iters, s.tp, s.device, s.global_batch, s.workdir) == (1000, 1, "cuda", 512, tmp_path)
    assert s.train_flags == ("--bf16", "--use-distributed-optimizer")
    assert s.method_lr == {"full": "1e-5"}  # LR_FREEZE, LR_LORA, LR_LLAMA_PRO: methods not in METHODS
    assert s.ko_train_input.endswith("kor_Hang/train/*.parquet")  # globs reach the tool unexpanded



def test_unusable_settings_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="TP='two' is not an integer"):
        settings(tmp_path, TP="two")
    with pytest.raises(SettingsError, match="TRAIN_ITERS=5 must exceed WARMUP_ITERS=10"):
        settings(tmp_path, TRAIN_ITERS="5")
    with pytest.raises(SettingsError, match="BASE_ITERS=10 must exceed"):
        settings(tmp_path, BASE_ITERS="10")
    assert settings(tmp_path, BASE_ITERS="10", HF_MODEL="/m").base_iters == 10  # no tiny base to pre-train
    # METHODS are the catalog's (megatron_scale/method_catalog.py), each once, checked before anything runs
    with pytest.raises(SettingsError, match="METHODS: unknown method 'scale_preserve': choose from scale-preserve"):
        settings(tmp_path, METHODS="scale_preserve full")
    with pytest.raises(SettingsError, match="METHODS='full lora full' names a method twice"):
        settings(tmp_path, METHODS="full lora full")



def test_smollm2_config_prepares_the_demo_model_and_corpora(tmp_path: Path) -> None:
    """examples/configs/smollm2-cpu.env: DEMO_MODEL=1 prepares SmolLM2 into $WORKDIR/models before
    the data (preprocessing reads its tokenizer); DEMO_CORPORA=1 writes the demo corpora's raw
    JSONL, which the three datasets are tokenised from with SmolLM2's tokenizer; the paper's LRs."""
    env = sourced_env("examples/configs/smollm2-cpu.env", WORKDIR=str(tmp_path),
                   METHODS="scale-preserve llama-pro full lora freeze")
    s = Settings.from_env(env, repo=REPO)
    model, raw = tmp_path / "models" / "smollm2-135m", tmp_path / "data" / "demo_raw"
    assert (s.demo_model, s.demo_corpora, s.hf_model, s.from_scratch) == (True, True, str(model), False)
    assert (s.ko_train_input, s.ko_eval_input, s.en_eval_input, s.extra_eval) == (
        str(raw / "ko_train.jsonl"), str(raw / "ko_valid.jsonl"), str(raw / "en_valid.jsonl"),
        (f"en_modern={raw / 'en_modern_valid.jsonl'}", f"en_passages={raw / 'en_passages_valid.jsonl'}"))
    assert (s.tp, s.device) == (1, "cpu")
    # the 20-minute default: SCALE-Preserve, SCALE-Route routed per character by the calibrated
    # centred cosine, and full fine-tuning at SCALE's LR (where it forgets within the budget)
    assert env["OMP_NUM_THREADS"] == "2" and (s.route_unit, s.route_statistic) == ("char", "centered-cosine")
    default = Settings.from_env(sourced_env("examples/configs/smollm2-cpu.env", WORKDIR=str(tmp_path)), repo=REPO)
    assert default.methods == ("scale-preserve", "scale-route", "full")
    assert {m: default.lr_of(m) for m in default.methods} == {"scale-preserve": "1e-3", "scale-route": "1e-3",
                                                              "full": "1e-3"}
    assert (default.train_iters, default.global_batch, default.benchmarks) == (16, 2, "arc_easy")
    assert set(default.step_hints) >= {"train", "upscale", "export", "benchmark", "route-sweep", "samples"}
    # the seven methods, one argument away, at the paper's per-method LRs
    every = Settings.from_env(sourced_env("examples/configs/smollm2-cpu-all.env", WORKDIR=str(tmp_path)), repo=REPO)
    assert every.methods == ("scale-preserve", "scale-adapt", "scale-route", "full", "lora", "freeze", "llama-pro")
    assert {m: every.lr_of(m) for m in every.methods} == {
        "scale-preserve": "1e-3", "scale-adapt": "1e-3", "scale-route": "1e-3", "llama-pro": "2e-4", "full": "1e-5",
        "lora": "1e-5", "freeze": "1e-5"}
    assert (every.train_iters, every.global_batch, every.benchmarks, every.demo_model) == (
        30, 4, "arc_easy,hellaswag", True)
    assert {m: s.lr_of(m) for m in s.methods} == {
        "scale-preserve": "1e-3", "llama-pro": "2e-4", "full": "1e-3", "lora": "1e-5", "freeze": "1e-5"}
    todo = actions(s)
    assert [a.title.split(" ")[0] for a in todo[:9]] == ["prepare", "data", "data", "data", "data", "data", "data",
                                                        "convert", "upscale"]
    got = resolved(s)
    assert got[0] == Command(kind="single", args=("tools/prepare_demo_model.py", "--output-dir", str(model)))
    assert got[1] == Command(kind="single", args=("tools/prepare_demo_data.py", "--output-dir", str(raw),
                                                  "--raw-only", "--larger"))
    pre = [list(c.args) for c in got[2:7] if isinstance(c, Command)]
    assert [(flag(a, "--input"), flag(a, "--tokenizer-model")) for a in pre] == [
        (str(raw / f"{n}.jsonl"), str(model))
        for n in ("ko_train", "ko_valid", "en_valid", "en_modern_valid", "en_passages_valid")]
    assert flag(pre[3], "--output-prefix") == str(tmp_path / "data" / "en_modern_eval")
    assert flag(pre[4], "--output-prefix") == str(tmp_path / "data" / "en_passages_eval")
    report = next(c for c in got if isinstance(c, Command) and c.args[0] == "tools/scale_report.py")
    assert report.args[-6:-2] == ("--old", "en_modern", "--old", "en_passages")
    assert flag(list(got[7].args), "--load") == str(model)  # type: ignore[union-attr]
    assert flag(train_args(s, "scale-preserve"), "--tokenizer-model") == str(model)
    # benchmark accuracy of the converted base and every method, on a small subset, with SmolLM2's tokenizer
    assert (s.benchmarks, s.benchmark_limit) == ("arc_easy", 50)
    bench = [c for c in got if isinstance(c, Command) and c.args[0] == "tools/eval_benchmarks.py"]
    assert [flag(list(c.args), "--load") for c in bench] == [
        str(tmp_path / "ckpt" / "base"), *(str(tmp_path / "runs" / m / "iter_0000000") for m in s.methods)]
    assert all(flag(list(c.args), "--tokenizer") == str(model) for c in bench)
    # done: the folder has its config.json, the raw corpora are written (a requeued job skips both)
    made(s, "demo-model")
    made(s, "data-demo-raw")
    got = resolved(s)
    assert got[:2] == [f"demo model ready: {model}", f"demo corpora (raw JSONL) ready in {raw}"]



def test_demo_settings_explicit_and_refused(tmp_path: Path) -> None:
    s = settings(tmp_path, DEMO_MODEL="1", HF_MODEL="/m/smol", DEMO_CORPORA="1", KO_EVAL_INPUT="/raw/ko.jsonl",
                  DATA_DIR="/d")
    assert s.hf_model == "/m/smol" and s.ko_eval_input == "/raw/ko.jsonl"  # the explicit ones win
    assert s.ko_train_input == "/d/demo_raw/ko_train.jsonl"
    plain = settings(tmp_path, HF_MODEL="/m/llama", KO_TRAIN_INPUT="/raw/ko")
    assert not plain.demo_model and [a.title for a in actions(plain)][0] == "data"  # no extra step
    with pytest.raises(SettingsError, match="DEMO_CORPORA=1 is for a Hugging Face base"):
        settings(tmp_path, DEMO_CORPORA="1")
    with pytest.raises(SettingsError, match="EXTRA_EVAL: 'ko=/raw/k.jsonl' is not NAME=RAW_INPUT"):
        settings(tmp_path, HF_MODEL="/m", EXTRA_EVAL="news=/raw/n.jsonl ko=/raw/k.jsonl")
    with pytest.raises(SettingsError, match="DEMO_MODEL=1 needs HF_MODEL"):
        Settings(workdir=tmp_path, data_dir=tmp_path, demo_model=True)



def test_benchmark_settings_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="BENCHMARK_LIMIT=1: 0 .every document. or at least 2"):
        settings(tmp_path, BENCHMARKS="arc_easy", BENCHMARK_LIMIT="1")
    with pytest.raises(SettingsError, match="BENCHMARKS='arc_easy hellaswag' is not comma-separated task names"):
        settings(tmp_path, BENCHMARKS="arc_easy hellaswag")


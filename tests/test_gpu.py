"""The product's paths on one GPU, as a user runs them: `python -m megatron_scale.train` for every
method in bf16 (SCALE-Preserve also with --scale-local-linear planar) (3 iterations, save at 2, resume to 3), conversion HF -> Megatron -> HF with
`--verify` on CUDA, and the biography benchmark for a few steps on CUDA.

Marked `gpu`: each skips, saying so, where no CUDA device is present (the CPU suite's device
audit, tests/test_device_audit.py, is what guards these paths there). tools/gpu_check.sh runs
them together with the Transformer Engine tests and the GPU benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import requires_gpus
from tests.convert._hf import make_hf
from megatron_scale.testing.runs import make_dataset, records

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("full", "scale-preserve", "scale-adapt", "scale-route", "freeze", "llama-pro", "lora", "scale-preserve+planar")
"""Each a --method; after a '+', a variant of it (EXTRA's flags)."""
MODEL = ("--num-layers 4 --hidden-size 128 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 256 "
         "--vocab-size 96 --seq-length 64 --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 "
         "--lr-warmup-iters 1 --device cuda --bf16 --log-interval 1").split()
EXTRA = {"freeze": ["--freeze-layers", "2"], "llama-pro": ["--llama-pro-blocks", "2"],
         "scale-preserve+planar": ["--scale-local-linear", "planar"]}


def _env() -> dict[str, str]:
    """The caller's environment with this checkout first on PYTHONPATH, the caller's entries kept:
    on a GPU node packages may live beside the image's Python (a --target folder on PYTHONPATH)."""
    kept = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{kept}" if kept else str(ROOT)}


def _run(cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out


def _train(*args: str) -> None:
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
          "-m", "megatron_scale.train", *MODEL, *args])


def test_the_subprocesses_keep_the_callers_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CPU: what the GPU tests hand their torchrun subprocesses."""
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    assert _env()["PYTHONPATH"].split(os.pathsep) == [str(ROOT), str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.delenv("PYTHONPATH")
    assert _env()["PYTHONPATH"] == str(ROOT)


def _method_trains_saves_and_resumes(method: str, data: str, base: Path, tmp_path: Path) -> None:
    save, metrics = tmp_path / method, tmp_path / f"{method}.jsonl"
    flags = ["--method", method.split("+")[0], "--data-path", data, "--save", str(save), "--train-iters", "3",
             "--save-interval", "2", "--eval-interval", "1", "--eval-iters", "1", "--metrics-file", str(metrics),
             *EXTRA.get(method, [])]
    _train(*flags, "--load", str(base), "--exit-interval", "2")  # from the base: saves at 2 and stops
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "2", method
    _train(*flags, "--load", str(save))  # resumes its own run from iteration 2
    recs = records(metrics)
    assert [r["iteration"] for r in recs] == [1, 2, 3], (method, recs)
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "3", method
    assert all(r["lm_loss"] == r["lm_loss"] and r["lm_loss"] < 20 for r in recs), (method, recs)
    assert records(metrics, "eval/valid"), method


@requires_gpus(1)
def test_every_method_trains_saves_and_resumes_on_one_gpu(tmp_path: Path) -> None:
    """The seven methods (and Preserve on the planar local linears) run side by side, one torchrun each (a tiny model: the GPU has room for
    all seven, and a GPU session's minutes are few); every method's failure is reported."""
    data = make_dataset(tmp_path / "ds", seed=0)
    base = tmp_path / "base"
    _train("--method", "full", "--data-path", data, "--train-iters", "4", "--save", str(base))
    base = base / "iter_0000004"  # the pre-trained model each method starts from (a run of its own)
    with ThreadPoolExecutor(max_workers=len(METHODS)) as pool:
        done = {m: pool.submit(_method_trains_saves_and_resumes, m, data, base, tmp_path) for m in METHODS}
    failed = {m: f.exception() for m, f in done.items() if f.exception() is not None}
    assert not failed, "\n\n".join(f"{m}: {e}" for m, e in failed.items())


@requires_gpus(1)
def test_conversion_round_trip_verifies_on_cuda(tmp_path: Path) -> None:
    make_hf(tmp_path / "hf", tied=True)
    tools = ROOT / "tools"
    _run([sys.executable, str(tools / "convert_hf_to_megatron.py"), "--load", str(tmp_path / "hf"),
          "--save", str(tmp_path / "mg"), "--no-progress"])
    out = _run([sys.executable, str(tools / "convert_megatron_to_hf.py"), "--load", str(tmp_path / "mg"),
                "--save", str(tmp_path / "back"), "--verify", "--no-progress"])
    summary = json.loads(out.stdout)  # the tool prints one JSON object, indented
    assert summary["verify_max_abs_error"] <= 1e-4, summary


@requires_gpus(1)
def test_biography_benchmark_runs_a_few_steps_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "bio"
    _run([sys.executable, str(ROOT / "tools" / "biography_benchmark.py"), "--preset", "cpu", "--device", "cuda",
          "--out", str(out), "--methods", "full", "scale-route", "--pretrain-people", "16", "--task0-people", "8",
          "--task1-people", "4", "--bios-per-person", "2", "--vocab-size", "400", "--num-layers", "2",
          "--hidden-size", "64", "--num-attention-heads", "8", "--num-query-groups", "4", "--ffn-hidden-size", "128",
          "--seq-length", "32", "--micro-batch-size", "4", "--global-batch-size", "4", "--pretrain-iters", "6",
          "--task0-iters", "4", "--task1-iters", "4", "--eval-interval", "2"])
    results = json.loads((out / "results.json").read_text())
    assert set(results["methods"]) >= {"full", "scale-route"}, results.keys()


def test_gpu_check_refuses_what_it_cannot_do_before_installing_anything(tmp_path: Path) -> None:
    """tools/gpu_check.sh: a missing --wheels folder and a machine without CUDA each stop it with
    one line, before pip runs (where a GPU is lent, the script itself is the check)."""
    env = {**os.environ, "PYTHON": sys.executable}
    script = str(ROOT / "tools" / "gpu_check.sh")
    bad = subprocess.run(["bash", script, "--wheels", str(tmp_path / "none")], capture_output=True, text=True,
                         env=env, timeout=120)
    assert bad.returncode == 2 and f"--wheels {tmp_path / 'none'} is not a folder" in bad.stderr
    unknown = subprocess.run(["bash", script, "--bogus"], capture_output=True, text=True, env=env, timeout=120)
    assert unknown.returncode == 2 and "unknown argument --bogus" in unknown.stderr
    import torch

    if not torch.cuda.is_available():
        done = subprocess.run(["bash", script, "--out", str(tmp_path / "out")], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 1 and "no CUDA device" in done.stderr, done.stderr
        assert not (tmp_path / "out").exists()

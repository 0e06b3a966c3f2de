"""SmolLM2-135M-Instruct trained with SCALE-Preserve, a few iterations on Korean, end to end
(the issue's reduced real-model run): the session's prepared folder and its TP=1 checkpoint
(tests/demo/conftest.py), upscaled at the default sizes, trained with `python -m
megatron_scale.train` on the konlpy Korean demo corpus tokenised with SmolLM2's own tokenizer,
then exported with `--preserve-head-only`. The export must be the original model bitwise (the
base weights were frozen and the preservation head reads only them), and the held-out Korean loss
after training must be below the loss before it (iteration 0's evaluation, the same batches)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.demo.conftest import ROOT, requires_demo_model, run_tool

ITERS = 4
TEXTS = (  # real text, English and Korean (the training language), cut to one length
    "The capital of France is Paris, and the capital of Germany is",
    "대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다.",
)


def _korean(folder: Path, out: Path) -> dict[str, str]:
    """The konlpy Korean demo corpus (megatron_scale/data/demo.py: bills and the constitution,
    every 10th document held out) tokenised with SmolLM2's tokenizer; dataset prefixes."""
    from megatron_scale.data.demo import korean_documents, split_held_out, write_jsonl
    from megatron_scale.data.preprocess import preprocess
    from megatron_scale.data.tokenizer import TokenizerSpec
    from megatron_scale.data.work import Settings

    train, valid = split_held_out(list(korean_documents()), 10)
    settings = Settings(tokenizer=TokenizerSpec("HuggingFaceTokenizer", str(folder)), append_eod=True)
    prefixes = {}
    for name, docs in (("ko_train", train), ("ko_valid", valid)):
        write_jsonl(str(out / f"{name}.jsonl"), docs)
        done = preprocess([str(out / f"{name}.jsonl")], str(out / name), settings, workers=1, progress=False)
        prefixes[name] = done.outputs["text"].prefix
    return prefixes


def _records(metrics: Path, kind: str) -> dict[int, dict]:
    return {r["iteration"]: r for r in map(json.loads, metrics.read_text().splitlines()) if r["kind"] == kind}


@requires_demo_model
@pytest.mark.dist
def test_trained_preserve_head_is_the_original_and_korean_loss_falls(
        smollm2: dict[str, Any], smollm2_megatron: dict[str, Any], tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, seconds = smollm2["folder"], {}
    start = time.perf_counter()
    data = _korean(folder, tmp_path)
    seconds["data"] = time.perf_counter() - start

    start = time.perf_counter()
    init, run, hf = tmp_path / "scale", tmp_path / "run", tmp_path / "hf_preserve"
    run_tool("upscale_checkpoint", "--load", str(smollm2_megatron["checkpoint"]), "--save", str(init),
             "--scale-variant", "preserve", "--scale-init", "normal", "--tensor-model-parallel-size", "1")
    seconds["upscale"] = time.perf_counter() - start

    start = time.perf_counter()
    metrics = tmp_path / "metrics.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           "-m", "megatron_scale.train", "--method", "scale-preserve", "--load", str(init),
           "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder),
           "--data-path", data["ko_train"], "--eval-data-path", f"ko={data['ko_valid']}",
           "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "2", "--device", "cpu",
           "--train-iters", str(ITERS), "--lr", "1e-3", "--min-lr", "1e-3", "--lr-warmup-iters", "0",
           "--lr-decay-style", "constant", "--eval-interval", str(ITERS), "--eval-iters", "2",
           "--log-interval", "1", "--save", str(run), "--save-interval", str(ITERS),
           "--metrics-file", str(metrics)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    seconds["train"] = time.perf_counter() - start
    train, evals = _records(metrics, "train"), _records(metrics, "eval/ko")
    assert sorted(train) == list(range(1, ITERS + 1)) and sorted(evals) == [0, ITERS], (train, evals)
    before, after = evals[0]["lm_loss"], evals[ITERS]["lm_loss"]
    assert after < before, f"held-out Korean loss {before:.4f} before training, {after:.4f} after"

    start = time.perf_counter()
    summary = run_tool("convert_megatron_to_hf", "--load", str(run / f"iter_{ITERS:07d}"), "--save", str(hf),
                       "--preserve-head-only", "--tokenizer", str(folder), "--no-progress")
    seconds["export"] = time.perf_counter() - start

    start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(folder)
    rows = [tok(t).input_ids for t in TEXTS]
    ids = torch.tensor([r[:min(map(len, rows))] for r in rows])
    original = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    exported = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    assert type(exported).__name__ == "LlamaForCausalLM", summary
    want, got = original.state_dict(), exported.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), [k for k in want if not torch.equal(want[k], got[k])]
    with torch.no_grad():
        ref, out = original(ids).logits, exported(ids).logits
    assert float(ref.abs().max()) > 1.0
    assert torch.equal(out, ref), f"max |diff| {float((out - ref).abs().max())}"
    seconds["compare"] = time.perf_counter() - start
    print(f"\nSmolLM2 SCALE-Preserve, {ITERS} iterations: Korean loss {before:.4f} -> {after:.4f}; "
          f"seconds {json.dumps({k: round(v, 1) for k, v in seconds.items()})}")

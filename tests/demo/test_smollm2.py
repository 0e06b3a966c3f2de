"""SmolLM2-135M-Instruct end to end, offline (tests/demo/conftest.py makes the artefacts once).

The prepared Hugging Face folder is transformers' GGUF load exactly (logits bitwise equal); the
folder converted to Megatron, upscaled untrained to SCALE-Preserve at the default sizes (9 heads
over 3 KV groups: one new group of 3 heads at TP=1, three at TP=3) and exported back to Hugging
Face gives the original model's logits exactly, at TP=1 and at TP=3. Trained a few iterations
with SCALE-Preserve on Korean (the issue's reduced real-model run), its preservation head exported
alone is still the original model bitwise, and the held-out Korean loss has fallen.

All in one file: tests/run.sh distributes tests by file (pytest-xdist --dist loadfile), so the
session's prepared folder and checkpoint are made once, on one worker. The benchmark tool's and
bits per byte's runs on the demo model are here for the same reason."""

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

from tests.demo.conftest import ROOT, TPS, requires_demo_model, run_tool

TEXTS = (
    "The capital of France is Paris, and the capital of Germany is",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
)


def _ids(tokenizer: Any) -> torch.Tensor:
    """Both texts, cut to the shorter one's length: a [2, s] batch of real tokens."""
    rows = [tokenizer(t).input_ids for t in TEXTS]
    s = min(len(r) for r in rows)
    return torch.tensor([r[:s] for r in rows])


def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture(scope="module")
def original(smollm2: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2["folder"])
    model = AutoModelForCausalLM.from_pretrained(smollm2["folder"], dtype=torch.float32).eval()
    ids = _ids(tok)
    return {"tokenizer": tok, "model": model, "ids": ids, "logits": _logits(model, ids)}


@requires_demo_model
def test_prepared_folder_is_the_gguf_model(smollm2: dict[str, Any], original: dict[str, Any]) -> None:
    import json

    from megatron_scale.data.demo_model import load_gguf

    summary = smollm2["summary"]
    assert summary["max_abs_logit_diff"] == 0.0 and summary["greedy"]["continuation"].strip()
    cfg = json.loads((smollm2["folder"] / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in cfg
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"], cfg["tie_word_embeddings"]) == (576, 30, 9, 3, 1536, 49152, True)
    assert "Apache License" in (smollm2["folder"] / "LICENSE").read_text()
    gguf_model, gguf_tok = load_gguf()
    assert torch.equal(_ids(gguf_tok), original["ids"])
    assert torch.equal(_logits(gguf_model, original["ids"]), original["logits"])
    assert float(original["logits"].abs().max()) > 1.0


@requires_demo_model
def test_prepare_refuses_a_non_empty_folder(smollm2: dict[str, Any]) -> None:
    from tests.demo.conftest import ROOT

    import subprocess
    import sys

    # the check comes before any loading: this costs only the tool's start-up
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "prepare_demo_model.py"), "--output-dir",
                           str(smollm2["folder"])], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: --output-dir {smollm2['folder']} exists and is not empty; give a new folder (or remove it)")


@requires_demo_model
@pytest.mark.dist
@pytest.mark.parametrize("tp", TPS)
def test_untrained_scale_export_is_the_original_model(smollm2_round_trip: Any, original: dict, tp: int) -> None:
    from transformers import AutoModelForCausalLM

    made = smollm2_round_trip(tp)
    dims = made["steps"]["upscale"]["scale_dims"]
    assert (dims["heads_up"], dims["groups_up"], dims["ffn_up"], dims["hidden_up"]) == (
        {1: (3, 1, 384, 144), 3: (9, 3, 384, 144)}[tp])
    # h/4 = 2.25 heads is no whole KV group: the summary says what the default picked instead
    notes = made["steps"]["upscale"]["size_notes"]
    assert len(notes) == 1 and "--scale-heads-up, --scale-groups-up" in notes[0], notes
    model = AutoModelForCausalLM.from_pretrained(made["folder"], trust_remote_code=True, dtype=torch.float32).eval()
    assert type(model).__name__ == "ScaleLlamaForCausalLM"
    ref = original["logits"]
    for head in ("auto", "preserve", "adapt"):  # untrained: z_a is z_p (the new output columns are zero)
        model.config.scale_output_head = head
        got = _logits(model, original["ids"])
        assert got.shape == ref.shape
        assert torch.equal(got, ref), f"TP={tp}, head {head}: max |diff| {float((got - ref).abs().max())}"
    model.config.scale_output_head = "auto"
    prompt = original["ids"][:1, :6]
    with torch.no_grad():
        want = original["model"].generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=2)
        assert torch.equal(model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=2), want)


ITERS = 4
KOREAN = "대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다."


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
        smollm2: dict[str, Any], smollm2_round_trip: Any, original: dict[str, Any], tmp_path: Path) -> None:
    """SCALE-Preserve from the session's TP=1 upscaled checkpoint (default sizes, normal init: the
    untrained round trip's, tests/demo/conftest.py), 4 iterations
    of `python -m megatron_scale.train` on the konlpy Korean corpus in SmolLM2's tokens (one rank),
    exported with --preserve-head-only: SmolLM2's weights and logits bitwise; Korean loss falls."""
    from transformers import AutoModelForCausalLM

    folder, seconds = smollm2["folder"], {}
    start = time.perf_counter()
    data = _korean(folder, tmp_path)
    seconds["data"] = time.perf_counter() - start

    start = time.perf_counter()
    made = smollm2_round_trip(1)  # made already where the untrained TP=1 test ran first (its file order)
    assert made["steps"]["upscale"]["scale_dims"]["heads_up"] == 3  # the default sizes at TP=1
    init, run, hf = made["checkpoint"], tmp_path / "run", tmp_path / "hf_preserve"
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
    exported = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    assert type(exported).__name__ == "LlamaForCausalLM", summary
    want, got = original["model"].state_dict(), exported.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), [k for k in want if not torch.equal(want[k], got[k])]
    korean = torch.tensor([original["tokenizer"](KOREAN).input_ids])
    for ids in (original["ids"], korean):  # English and code, then Korean (the training language)
        ref, out = _logits(original["model"], ids), _logits(exported, ids)
        assert float(ref.abs().max()) > 1.0
        assert torch.equal(out, ref), f"max |diff| {float((out - ref).abs().max())}"
    seconds["compare"] = time.perf_counter() - start
    print(f"\nSmolLM2 SCALE-Preserve, {ITERS} iterations: Korean loss {before:.4f} -> {after:.4f}; "
          f"seconds {json.dumps({k: round(v, 1) for k, v in seconds.items()})}")


# tools/eval_benchmarks.py on the demo model, and bits per byte with its tokenizer on Korean (about
# 3 tokens per Hangul syllable); here, not in a file of their own, so the model is prepared once
@requires_demo_model
def test_eval_benchmarks_tool_on_smollm2(smollm2: dict[str, Any], smollm2_megatron: dict[str, Any],
                                         tmp_path: Path) -> None:
    from megatron_scale.evaluation.tasks import TaskError, package_root

    try:
        package_root()
    except TaskError as e:
        pytest.skip(str(e))
    out = tmp_path / "eval" / "smollm2.json"
    summary = run_tool("eval_benchmarks", "--model", str(smollm2["folder"]), "--tasks", "arc_easy,winogrande,mmlu",
                       "--limit", "6", "--seed", "3", "--output", str(out))
    record = json.loads(out.read_text())
    assert set(record["results"]) == set(summary["results"]) == {"arc_easy", "winogrande", "mmlu"}
    arc = record["results"]["arc_easy"]
    assert (arc["n"], arc["n_total"], arc["num_fewshot"], arc["split"]) == (6, 570, 0, "validation")
    assert 0 <= arc["acc"] <= 1 and arc["acc_stderr"] >= 0 and "acc_norm" in arc
    assert "acc_norm" not in record["results"]["winogrande"]  # the harness reports acc only there
    assert len(arc["per_item"]) == 6 and all(len(i["lls"]) == 4 for i in arc["per_item"])
    assert "| arc_easy | 0 | validation | 6/570 |" in out.with_suffix(".md").read_text()
    again = tmp_path / "again.json"  # the same seed draws the same documents and scores
    run_tool("eval_benchmarks", "--model", str(smollm2["folder"]), "--tasks", "arc_easy", "--limit", "6",
             "--seed", "3", "--output", str(again))
    assert json.loads(again.read_text())["results"]["arc_easy"]["per_item"] == arc["per_item"]
    # --load: the same documents scored through the project's own model from the converted
    # checkpoint (what the recipe's benchmark step runs) choose as the HF folder does
    loaded = tmp_path / "loaded.json"
    run_tool("eval_benchmarks", "--load", str(smollm2_megatron["checkpoint"]), "--tokenizer", str(smollm2["folder"]),
             "--tasks", "arc_easy,winogrande,mmlu", "--limit", "6", "--seed", "3", "--output", str(loaded))
    got = json.loads(loaded.read_text())["results"]
    for task, r in record["results"].items():
        assert [(i["doc_id"], i["pred"], i.get("pred_norm")) for i in got[task]["per_item"]] == [
            (i["doc_id"], i["pred"], i.get("pred_norm")) for i in r["per_item"]], task
        for g, h in zip(got[task]["per_item"], r["per_item"], strict=True):
            assert g["lls"] == pytest.approx(h["lls"], rel=1e-5, abs=1e-3), task


@requires_demo_model
def test_bits_per_byte_with_smollm2_tokenizer_on_korean(smollm2: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    from tests.evaluation.test_bpb import check_stream

    tok = AutoTokenizer.from_pretrained(smollm2["folder"])
    r = check_stream(lambda s: tok.encode(s, add_special_tokens=False), tok.decode)
    syllables = (r["bytes"] - r["chars"]) // 2  # 3 bytes and 1 char each; the ASCII rest 1 and 1
    assert r["tokens"] >= 2 * syllables  # byte-like: about 3 tokens per syllable

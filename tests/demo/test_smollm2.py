"""SmolLM2-135M-Instruct end to end, offline (tests/demo/conftest.py makes the artefacts once).

The prepared Hugging Face folder is transformers' GGUF load exactly (logits bitwise equal); the
folder converted to Megatron, upscaled untrained to SCALE-Preserve at the default sizes (9 heads
over 3 KV groups: one new group of 3 heads at TP=1, three at TP=3) and exported back to Hugging
Face gives the original model's logits exactly, at TP=1 and at TP=3."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.demo.conftest import TPS, requires_demo_model

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

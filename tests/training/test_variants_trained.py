"""Issue 45's two variants end to end, in one run (torchrun): SCALE-Preserve upscaled from a base
and trained with --scale-output-rows hangul and a max-prob gate (--scale-gate-*) together.

One run holds both, so the suite trains one base and one pair of TP runs for the two (each
variant alone, and its neutral setting, is tested without torchrun in tests/training/test_gate.py
and test_output_rows.py):
- training at TP=2 gives TP=1's losses; the checkpoint records the rows and the gate;
- W_out_up's rows outside Hangul stay exactly zero (the gate scales the new term, never these rows);
- the Hugging Face export equals Megatron's logits (--verify, rows and gate in config.json); its
  z_a equals z_p on every token outside Hangul, the gate changes the forward, and generate() is
  the greedy decoding of that forward, with and without the cache;
- without --tokenizer-model the rows are refused before work, naming the flag; a run from the
  SCALE checkpoint may change the rows (a training setting) but not the geometry.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import torch

from tests import _unit_vocab
from megatron_scale.model.layers.output_rows import script_rows
from megatron_scale.testing.runs import VOCAB, command, losses, make_dataset, train

pytestmark = pytest.mark.dist

GATE = ("--scale-gate-statistic", "max-prob", "--scale-gate-tau", "0.1", "--scale-gate-temperature", "0.02")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("variants")
    en, ko = make_dataset(root / "en", seed=3, docs=80), make_dataset(root / "ko", seed=4, docs=80)
    tok = _unit_vocab.write_tokenizer(str(root / "tok"), _unit_vocab.pieces(VOCAB))
    train(1, root / "base.jsonl", "--method", "full", "--train-iters", "4", "--data-path", en, "--save", str(root / "base"))
    run = ("--method", "scale-preserve", "--load", str(root / "base" / "iter_0000004"), "--data-path", ko,
           "--train-iters", "3", "--lr", "3e-2", "--scale-output-rows", "hangul", *GATE,
           "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok)
    tp2 = train(2, root / "tp2.jsonl", *run, "--tensor-model-parallel-size", "2", "--save", str(root / "tp2"))
    tp1 = train(1, root / "tp1.jsonl", *run)
    return {"root": root, "tok": tok, "tp1": losses(tp1), "tp2": losses(tp2), "ckpt": root / "tp2" / "iter_0000003",
            "base": root / "base" / "iter_0000004", "ko": ko}


def test_training_at_tp2_is_tp1_records_both_and_moves_only_the_script_rows(trained: dict) -> None:
    from megatron_scale.checkpoint.reader import MegatronReader

    assert sorted(trained["tp2"]) == [1, 2, 3]
    for it, loss in trained["tp1"].items():
        assert trained["tp2"][it] == pytest.approx(loss, abs=1e-5), it
    reader = MegatronReader(trained["ckpt"])
    dims = reader.records.scale["dims"]
    assert dims["output_rows"] == "hangul"
    assert (dims["gate_statistic"], dims["gate_tau"], dims["gate_temperature"], dims["gate_direction"]) == (
        "max-prob", 0.1, 0.02, "above")
    w = reader.get("output_layer.weight_up")
    rows = script_rows(_unit_vocab.pieces(VOCAB), w.shape[0], "hangul")
    assert (w[~rows] == 0).all()  # zero from the upscaling, and never moved
    assert (w[rows] != 0).all(dim=1).float().mean() > 0.9  # every Hangul row trained (softmax reaches each)


def test_export_equals_megatron_applies_the_gate_and_moves_only_hangul(trained: dict) -> None:
    from transformers import AutoModelForCausalLM

    from megatron_scale.convert import convert_megatron_to_hf

    out = trained["root"] / "hf"
    summary = convert_megatron_to_hf(trained["ckpt"], out, progress=False, verify=True, tolerance=1e-4,
                                     tokenizer=trained["tok"])
    assert summary["verify_max_abs_error"] <= 1e-4
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, dtype=torch.float32).eval()
    cfg = model.config
    assert (cfg.scale_output_rows, cfg.scale_gate_statistic, cfg.scale_gate_tau) == ("hangul", "max-prob", 0.1)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        z_a = model(ids).logits
        cfg.scale_gate_statistic = "none"
        ungated = model(ids).logits
        cfg.scale_gate_statistic = "max-prob"
        assert float((z_a - ungated).abs().max()) > 1e-3  # the exported forward applies the gate
        cfg.scale_output_head = "preserve"
        z_p = model(ids).logits
        cfg.scale_output_head = "auto"
        rows = script_rows(_unit_vocab.pieces(VOCAB), z_a.shape[-1], "hangul")
        assert torch.equal(z_a[..., ~rows], z_p[..., ~rows]) and (z_a[..., rows] != z_p[..., rows]).any()
        # generate() is the greedy decoding of this forward, with and without the cache
        prompt, steps = ids[:, :4], 6
        want = prompt
        for _ in range(steps):
            want = torch.cat((want, model(want).logits[:, -1].argmax(-1, keepdim=True)), dim=1)
        for cache in (True, False):
            got = model.generate(prompt, max_new_tokens=steps, do_sample=False, use_cache=cache)
            assert torch.equal(got, want), cache


def test_scoped_rows_need_the_tokenizer(trained: dict) -> None:
    args = command(1, "--method", "scale-preserve", "--load", str(trained["base"]), "--data-path", trained["ko"],
                   "--train-iters", "3", "--scale-output-rows", "hangul")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--scale-output-rows hangul (or the checkpoint's): the rows come from the byte-level tokenizer" in (
        done.stdout + done.stderr)


def test_a_run_from_a_scale_checkpoint_may_change_the_rows(trained: dict) -> None:
    """--scale-output-rows is a training setting, not geometry: given on a SCALE checkpoint it
    overrides the recorded one (the recipe upscales first, then trains with it); not given, the
    checkpoint's holds. The geometry's flags are still compared with the checkpoint's."""
    from megatron_scale.testing.runs import RUN
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import FlagError, plan

    base = [*RUN, "--method", "scale-preserve", "--load", str(trained["ckpt"]), "--data-path", trained["ko"],
            "--train-iters", "3", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", trained["tok"]]
    assert plan(parse(base), 1).method.dims.training.output_rows == "hangul"
    assert plan(parse([*base, "--scale-output-rows", "all"]), 1).method.dims.training.output_rows == "all"
    with pytest.raises(FlagError, match="has hidden_up=.* but --scale-hidden-up gives 3"):
        plan(parse([*base, "--scale-hidden-up", "3"]), 1)

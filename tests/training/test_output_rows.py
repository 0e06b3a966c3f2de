"""Script-scoped output rows (--scale-output-rows, model/layers/output_rows.py; issue 45).

- The rows of a script are derived from a byte-level vocabulary's bytes: a hand-made one with
  Hangul (tests/_unit_vocab.py), and byte strings that begin, end or hold a character.
- The gradient hook: with every row in scope the output layer's gradients are the unscoped ones
  bit for bit (the variant at its neutral setting is SCALE-Preserve); with Hangul's rows, the other
  rows' gradient is exactly zero and Hangul's is the unscoped one, at TP=1 and TP=2.
- End to end (torchrun): SCALE-Preserve upscaled from a base and trained with --scale-output-rows
  hangul at TP=2 gives TP=1's losses; W_out_up's rows outside Hangul stay exactly zero and the
  checkpoint records the setting; the Hugging Face export equals Megatron's logits (--verify),
  its z_a equals z_p on every token outside Hangul, and its generate() is the greedy decoding of
  that forward. Without --tokenizer-model the run is refused before work, naming the flag.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import _unit_vocab
from tests._dist import run_ranks
from megatron_scale.model.layers.output_rows import in_script, script_rows
from megatron_scale.testing.runs import VOCAB, command, losses, make_dataset, train

HANGUL_PIECES = {b"\xed\x95", b"\xb5\xad", b" \xec", b" \xeb", b"\xec\x9e\xa5", b"\xea\xb3"}  # _unit_vocab's merges


def test_script_rows_of_a_hand_made_byte_vocabulary() -> None:
    pieces = _unit_vocab.pieces(VOCAB)
    rows = script_rows(pieces, VOCAB + 4, "hangul")  # a padded vocabulary: 4 rows past the tokenizer's
    assert rows.shape == (VOCAB + 4,) and not rows[VOCAB:].any()
    # by hand: every single byte of this vocabulary comes from a Hangul syllable (its lead bytes
    # 0xea-0xed and continuation bytes), and so do the merges but " h"; ASCII and the special token do not
    want = {i for i, p in enumerate(pieces) if (len(p) == 1 and p[0] >= 0x80) or p in HANGUL_PIECES}
    assert {i for i in range(VOCAB) if rows[i]} == want
    assert len(want) == len({b for ch in "한국어문장세계" for b in ch.encode()}) + len(HANGUL_PIECES)


@pytest.mark.parametrize(("piece", "inside"), [
    ("한".encode(), True), (" 한국".encode(), True), ("a한".encode()[:2], True),  # whole; a lead byte after ASCII
    (b"\x80", True), (b"\xb0\x80abc", True),  # ends 가 (ea b0 80) before ASCII
    (b"\xe1", True), (b"\xe1\x84", True), (b"\xe1\x80", False),  # Jamo (e1 84-87) may follow; Myanmar (e1 80) not
    ("é".encode(), False), ("“".encode(), False), (b"\xe2\x80", False), (b"\xc3", False),  # Latin, punctuation
    (b"hello", False), ("漢".encode(), False), (b"\xff", False), (b"", False),
])
def test_in_script(piece: bytes, inside: bool) -> None:
    assert in_script(piece, "hangul") is inside


def test_unknown_script_is_named() -> None:
    with pytest.raises(ValueError, match="--scale-output-rows: unknown script 'latin'; choose one of hangul"):
        script_rows([b"a"], 1, "latin")


def _grads(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_layers
    from megatron_scale.model.layers.output_rows import scope_output_rows
    from megatron_scale.scale_config import ScaleConfig
    from tests import _tiny

    init_distributed(world, 1, device="cpu")
    state = _tiny.base_state_dict(tied=False)
    rows = script_rows(_unit_vocab.pieces(VOCAB), VOCAB, "hangul")
    out = {}
    for name, scope in (("plain", None), ("all", torch.ones(VOCAB, dtype=torch.bool)), ("hangul", rows)):
        model = _tiny.build_scale(_tiny.base_config(world), ScaleConfig(init="normal"), False, state)
        layer = output_layers(model)[0]
        with torch.no_grad():  # a trained-looking W_out_up, so that z_a differs from z_p
            layer.weight_up.normal_(0, 0.5, generator=torch.Generator().manual_seed(7 + rank))
        if scope is not None:
            assert scope_output_rows(output_layers(model), scope) == int(scope.sum())
        b = _tiny.batch()
        logits = model(b["input_ids"], b["position_ids"], b["attention_mask"])
        logits.float().pow(2).mean().backward()  # every logit of this rank's vocabulary slice has a gradient
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        out[name] = grads
        out["range"] = (layer.vocab_start_index, layer.vocab_end_index)
        if name == "hangul":
            try:
                scope_output_rows(output_layers(model), scope)
            except ValueError as e:
                out["twice"] = str(e)
    return out


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_the_hook_keeps_the_script_rows_gradient_bit_for_bit(tp: int) -> None:
    rows = script_rows(_unit_vocab.pieces(VOCAB), VOCAB, "hangul")
    moved = torch.zeros(VOCAB, dtype=torch.bool)  # rows whose unscoped gradient is not zero, over the ranks
    for r in run_ranks(_grads, tp):
        plain, every, hangul = r["plain"], r["all"], r["hangul"]
        assert sorted(plain) == sorted(every) == sorted(hangul)
        assert [n for n in plain if not torch.equal(plain[n], every[n])] == []  # every row: Preserve's, bitwise
        lo, hi = r["range"]
        local = rows[lo:hi]
        (key,) = [n for n in plain if n.endswith("output_layer.weight_up")]
        assert torch.equal(hangul[key][local], plain[key][local]) and (hangul[key][~local] == 0).all()
        moved[lo:hi] = (plain[key] != 0).any(-1)
        assert [n for n in plain if n != key and not torch.equal(plain[n], hangul[n])] == []
        assert "scoped already" in r["twice"]
    assert moved.all()  # so the zeros above are the hook's (at TP=2 one rank's slice may hold no Hangul row)


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("output_rows")
    en, ko = make_dataset(root / "en", seed=3, docs=80), make_dataset(root / "ko", seed=4, docs=80)
    tok = _unit_vocab.write_tokenizer(str(root / "tok"), _unit_vocab.pieces(VOCAB))
    train(1, root / "base.jsonl", "--method", "full", "--train-iters", "4", "--data-path", en, "--save", str(root / "base"))
    run = ("--method", "scale-preserve", "--load", str(root / "base" / "iter_0000004"), "--data-path", ko,
           "--train-iters", "3", "--scale-output-rows", "hangul", "--tokenizer-type", "HuggingFaceTokenizer",
           "--tokenizer-model", tok)
    tp2 = train(2, root / "tp2.jsonl", *run, "--tensor-model-parallel-size", "2", "--save", str(root / "tp2"))
    tp1 = train(1, root / "tp1.jsonl", *run)
    return {"root": root, "tok": tok, "tp1": losses(tp1), "tp2": losses(tp2), "ckpt": root / "tp2" / "iter_0000003",
            "base": root / "base" / "iter_0000004", "ko": ko}


@pytest.mark.dist
def test_scoped_training_at_tp2_is_tp1_and_trains_only_the_script_rows(scoped: dict) -> None:
    from megatron_scale.checkpoint.reader import MegatronReader

    assert sorted(scoped["tp2"]) == [1, 2, 3]
    for it, loss in scoped["tp1"].items():
        assert scoped["tp2"][it] == pytest.approx(loss, abs=1e-5), it
    reader = MegatronReader(scoped["ckpt"])
    assert reader.records.scale["dims"]["output_rows"] == "hangul"
    w = reader.get("output_layer.weight_up")
    rows = script_rows(_unit_vocab.pieces(VOCAB), w.shape[0], "hangul")
    assert (w[~rows] == 0).all()  # zero from the upscaling, and never moved
    assert (w[rows] != 0).all(dim=1).float().mean() > 0.9  # every Hangul row trained (softmax reaches each)


@pytest.mark.dist
def test_export_of_a_scoped_model_equals_megatron_and_moves_only_hangul(scoped: dict) -> None:
    from transformers import AutoModelForCausalLM

    from megatron_scale.convert import convert_megatron_to_hf

    out = scoped["root"] / "hf"
    summary = convert_megatron_to_hf(scoped["ckpt"], out, progress=False, verify=True, tolerance=1e-4,
                                     tokenizer=scoped["tok"])
    assert summary["verify_max_abs_error"] <= 1e-4
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, dtype=torch.float32).eval()
    assert model.config.scale_output_rows == "hangul"
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        z_a = model(ids).logits
        model.config.scale_output_head = "preserve"
        z_p = model(ids).logits
        model.config.scale_output_head = "auto"
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


@pytest.mark.dist
def test_scoped_rows_need_the_tokenizer(scoped: dict) -> None:
    args = command(1, "--method", "scale-preserve", "--load", str(scoped["base"]), "--data-path", scoped["ko"],
                   "--train-iters", "3", "--scale-output-rows", "hangul")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--scale-output-rows hangul (or the checkpoint's): the rows come from the byte-level tokenizer" in (
        done.stdout + done.stderr)


@pytest.mark.dist
def test_a_run_from_a_scale_checkpoint_may_change_the_rows(scoped: dict) -> None:
    """--scale-output-rows is a training setting, not geometry: given on a SCALE checkpoint it
    overrides the recorded one (the recipe upscales first, then trains with it); not given, the
    checkpoint's holds. The geometry's flags are still compared with the checkpoint's."""
    from megatron_scale.testing.runs import RUN
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import FlagError, plan

    base = [*RUN, "--method", "scale-preserve", "--load", str(scoped["ckpt"]), "--data-path", scoped["ko"],
            "--train-iters", "3", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", scoped["tok"]]
    assert plan(parse(base), 1).method.dims.output_rows == "hangul"
    assert plan(parse([*base, "--scale-output-rows", "all"]), 1).method.dims.output_rows == "all"
    with pytest.raises(FlagError, match="has hidden_up=.* but --scale-hidden-up gives 3"):
        plan(parse([*base, "--scale-hidden-up", "3"]), 1)

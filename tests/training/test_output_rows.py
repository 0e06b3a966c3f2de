"""Script-scoped output rows (--scale-output-rows, model/layers/output_rows.py; issue 45).

- The rows of a script are derived from a byte-level vocabulary's bytes: a hand-made one with
  Hangul (tests/_unit_vocab.py), and byte strings that begin, end or hold a character.
- The gradient hook: with every row in scope the output layer's gradients are the unscoped ones
  bit for bit (the variant at its neutral setting is SCALE-Preserve); with Hangul's rows, the other
  rows' gradient is exactly zero and Hangul's is the unscoped one, at TP=1 and TP=2.
- End to end (torchrun, training, the record, the export, the refusal without a tokenizer):
  tests/training/test_variants_trained.py, one run with both of issue 45's variants.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests import _unit_vocab
from tests._dist import run_ranks
from megatron_scale.model.layers.output_rows import in_script, script_rows
from megatron_scale.testing.runs import VOCAB

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

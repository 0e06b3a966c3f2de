"""route_eval/script.py: the script routers on a hand-made byte-level vocabulary with Hangul."""

from __future__ import annotations

import math

import pytest
import torch

from megatron_scale.route_eval import script
from megatron_scale.route_eval.curves import metric_at

# 256 single bytes, then a merged Hangul syllable, a word with its space and a special token
PIECES = [bytes([b]) for b in range(256)] + ["한".encode(), b" ok", b""]
HAN, OK, SPECIAL = 256, 257, 258


def ids(text: str) -> list[int]:
    return list(text.encode())


ROWS = [ids("a") + ids("글") + [HAN, OK],         # a | 글 as 3 byte tokens | 한 | " ok"
        ids("국") + [SPECIAL, HAN] + ids("x")]    # 국 as 3 byte tokens (the window's first) | special | 한 | x


def test_each_character_takes_its_own_script_and_the_one_before_within_its_row() -> None:
    own, before = script.unit_hangul(PIECES, torch.tensor(ROWS))
    assert own.view(2, 6).tolist() == [[False, True, True, True, True, False],
                                       [True, True, True, False, True, False]]
    assert before.view(2, 6).tolist() == [[False, False, False, False, True, True],
                                          [False, False, False, True, False, True]]


def test_routed_perplexity_takes_z_a_exactly_on_the_routed_characters() -> None:
    labels = torch.tensor(ROWS).view(-1)
    g = torch.Generator().manual_seed(0)
    rec = {"labels": labels, "loss_p": torch.rand(12, generator=g), "loss_a": torch.rand(12, generator=g)}
    rec = script.with_script_statistics(rec, PIECES, seq_length=6)
    own, before = script.unit_hangul(PIECES, torch.tensor(ROWS))
    for key, to_a in ((script.ORACLE, own), (script.PREVIOUS, before)):
        want = math.exp(float(torch.where(to_a, rec["loss_a"], rec["loss_p"]).double().mean()))
        got = metric_at(rec, key.removeprefix("stat/"), script.TAU, "ppl", script.DIRECTION)
        assert got == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="script router: 11 records for 12 labels"):
        script.with_script_statistics({**rec, "loss_p": rec["loss_p"][:11]}, PIECES, seq_length=6)


def test_hangul_ranges() -> None:
    assert script.is_hangul("한") and script.is_hangul("ㄱ") and script.is_hangul("\u1100")
    assert not script.is_hangul("a") and not script.is_hangul("漢") and not script.is_hangul("\ufffd")


def test_the_frontier_rows_of_a_checkpoint_with_a_tokenizer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """reports/route_frontier.py's two script rows, worked out by hand: English on z_p everywhere,
    Korean (no spaces: every character Hangul) on z_a except, for the previous-character router,
    each window's first character."""
    from megatron_scale.data.tokenizer import HuggingFaceTokenizer, token_bytes, train_byte_bpe
    from megatron_scale.reports.recipe_frontier import Axis
    from megatron_scale.reports.route_frontier import SCRIPT_ORACLE, SCRIPT_PREVIOUS, checkpoint_rows
    from megatron_scale.route_stats.statistics import STATISTICS

    folder = train_byte_bpe(["hello world, the words of an English text."] * 20, 300, str(tmp_path / "tok"))
    tok, pieces = HuggingFaceTokenizer(folder), token_bytes(folder)
    n = 12
    en = tok.encode("hello world, the words of an English text, hello world.")[:n]
    ko = tok.encode("한국어문장서울세계한국어문장")[:n]
    assert len(en) == len(ko) == n

    def one(labels: list[int], loss_p: float, loss_a: float) -> dict[str, torch.Tensor]:
        rec = {"labels": torch.tensor(labels), "loss_p": torch.full((n,), loss_p), "loss_a": torch.full((n,), loss_a),
               "correct_p": torch.ones(n, dtype=torch.bool), "correct_a": torch.ones(n, dtype=torch.bool)}
        return rec | {f"stat/{s}": torch.full((n,), 0.5) for s in STATISTICS}

    records = {"en": one(en, 2.0, 3.0), "ko": one(ko, 4.0, 2.0), "cal/en": one(en, 2.0, 3.0), "cal/ko": one(ko, 4.0, 2.0)}
    rows = checkpoint_rows(records, {"load": "ckpt", "seq_length": n, "tokenizer": folder}, Axis.of("en", "ko"),
                           units=("char",))
    assert rows["points"][SCRIPT_ORACLE] == pytest.approx((0.5, 1.0))  # Korean 2 nats of 4, English kept
    kept = 1  # the window's first character stays on z_p: its tokens, however the BPE cut it
    while b"".join(pieces[t] for t in ko[:kept]) != "한".encode():
        kept += 1
    assert 1 <= kept <= 3
    want_ko = (kept * 4.0 + (n - kept) * 2.0) / n
    assert rows["points"][SCRIPT_PREVIOUS] == pytest.approx((1 - want_ko / 4.0, 1.0))
    assert [d["router"] for d in rows["detail"]["script"]] == [SCRIPT_ORACLE, SCRIPT_PREVIOUS]

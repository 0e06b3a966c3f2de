"""Routing units (route_eval/units.py) on a hand-made Korean string, coded by a byte-level BPE
learned from English only (so each Hangul syllable is three byte tokens, as SmolLM2 codes most):
per character, every byte token of a syllable takes one decision and no unit holds part of a
character; per word, one decision per whitespace-delimited word; per token, the statistic is
untouched. Pooling: the mean (or the first token's statistic) of a unit, on every token of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from megatron_scale.model.layers.routing import keeps
from megatron_scale.data.tokenizer import token_bytes
from megatron_scale.route_eval.units import pool, pooled_records, unit_ids

TEXT = "한국어 문장, hello 세계!\n서울"


@pytest.fixture(scope="module")
def coded(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[bytes], list[int]]:
    from megatron_scale.data.tokenizer import HuggingFaceTokenizer, train_byte_bpe

    folder = train_byte_bpe(["hello world, the words of an English text."] * 20, 300,
                            str(tmp_path_factory.mktemp("tok")))
    tok = HuggingFaceTokenizer(folder)
    ids = tok.encode(TEXT)
    pieces = token_bytes(folder)
    assert b"".join(pieces[i] for i in ids) == TEXT.encode("utf-8")  # the byte table inverts the BPE alphabet
    assert pieces[tok.eod] == b""  # a special token has no bytes
    return pieces, ids


def _units(pieces: list[bytes], ids: list[int], unit: str) -> list[bytes]:
    u = unit_ids(pieces, torch.tensor([ids]), unit).tolist()
    return [b"".join(pieces[i] for i, k in zip(ids, u, strict=True) if k == j) for j in range(u[-1] + 1)]


def test_char_units_are_whole_characters(coded: tuple[list[bytes], list[int]]) -> None:
    pieces, ids = coded
    hangul = [i for i in ids if pieces[i] and (pieces[i][0] & 0xC0 == 0x80 or pieces[i][0] >= 0xE0)]
    assert len(hangul) >= 3 * 8  # 8 syllables, byte-coded: 3 tokens each at least
    units = _units(pieces, ids, "char")
    for u in units:
        u.decode("utf-8")  # never part of a character
    for syllable in "한국어문장세계서울":
        assert syllable.encode("utf-8") in units  # its 3 byte tokens: one unit
    stat = torch.rand(len(ids), generator=torch.Generator().manual_seed(0))
    u = unit_ids(pieces, torch.tensor([ids]), "char")
    pooled = pool(stat, u)
    decision = keeps(pooled, float(pooled.median()))
    for j in range(int(u[-1]) + 1):
        members = u == j
        assert decision[members].all() or not decision[members].any()  # one decision per character
        assert torch.allclose(pooled[members], stat[members].mean().expand(int(members.sum())))
        assert torch.equal(pool(stat, u, "first")[members], stat[members][:1].expand(int(members.sum())))


def test_word_and_token_units(coded: tuple[list[bytes], list[int]]) -> None:
    pieces, ids = coded
    words = [w.strip() for w in _units(pieces, ids, "word")]
    assert [w.decode("utf-8") for w in words] == ["한국어", "문장,", "hello", "세계!", "서울"]
    assert _units(pieces, ids, "token") == [pieces[i] for i in ids]
    labels = torch.tensor([ids[:10], ids[10:20]])  # two windows: no unit spans both
    u = unit_ids(pieces, labels, "char").view(2, 10)
    assert int(u[1, 0]) == int(u[0, -1]) + 1
    stat = torch.rand(20)
    rec = {"stat/cosine": stat, "loss_p": torch.zeros(20), "loss_a": torch.ones(20)}
    out = pooled_records(rec, labels, pieces, "token")
    assert torch.equal(out["stat/cosine"], stat) and out["loss_a"] is rec["loss_a"]
    with pytest.raises(ValueError, match="--route-unit: unknown unit 'byte'"):
        unit_ids(pieces, labels, "byte")
    with pytest.raises(ValueError, match="--route-pool: unknown pooling 'max'"):
        pool(stat, u.flatten(), "max")


def test_not_a_byte_level_tokenizer(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--tokenizer .*: no tokenizer.json"):
        token_bytes(str(tmp_path))

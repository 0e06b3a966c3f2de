"""Bits per byte and per character count the bytes of the text the scored tokens decode to, as
one stream, for Korean too: a byte-level BPE that never saw Hangul (trained here on English, as
SmolLM2's tokenizer barely did) spends one token per UTF-8 byte on it, and decoding window by
window would count replacement characters instead. SmolLM2's own tokenizer:
tests/demo/test_smollm2.py::test_bits_per_byte_with_smollm2_tokenizer_on_korean."""

from __future__ import annotations

import math

import pytest

from megatron_scale.evaluation.bpb import TextLoss, bits_per_unit

KOREAN = "대한민국은 민주공화국이다. 모든 국민은 법 앞에 평등하다."
ENGLISH = "The quick brown fox jumps over the lazy dog."


def _byte_bpe():  # noqa: ANN202
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([ENGLISH] * 50, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def check_stream(encode, decode) -> dict:  # noqa: ANN001
    """KOREAN's loss gathered in 5-token windows: bytes and chars are the whole decoded text's."""
    ids = encode(KOREAN)
    text_bytes = len(KOREAN.encode("utf-8"))
    syllables = sum("가" <= c <= "힣" for c in KOREAN)
    assert text_bytes == 3 * syllables + (len(KOREAN) - syllables)
    loss = TextLoss()
    for start in range(0, len(ids), 5):  # windows of 5 tokens: most cut a syllable's bytes apart
        loss.add(2.0 * len(ids[start:start + 5]), ids[start:start + 5])
    r = loss.result(decode)
    assert (r["bytes"], r["chars"], r["tokens"]) == (text_bytes, len(KOREAN), len(ids))
    assert r["bits_per_byte"] == pytest.approx(2.0 * len(ids) / (math.log(2) * text_bytes))
    assert r["bits_per_char"] == pytest.approx(2.0 * len(ids) / (math.log(2) * len(KOREAN)))
    assert r["ppl"] == pytest.approx(math.exp(2.0))
    windowwise = sum(len(decode(ids[s:s + 5]).encode("utf-8")) for s in range(0, len(ids), 5))
    assert windowwise != text_bytes  # the per-window decode this guards against would miscount
    return r


def test_korean_bytes_are_the_decoded_text_bytes() -> None:
    tok = _byte_bpe()
    r = check_stream(lambda s: tok.encode(s).ids, tok.decode)
    assert r["tokens"] == r["bytes"]  # unseen Hangul: one byte token per byte
    en = TextLoss()
    ids = tok.encode(ENGLISH).ids
    en.add(1.0 * len(ids), ids)
    assert en.result(tok.decode)["bytes"] == len(ENGLISH) > 3 * len(ids)  # seen English: merged tokens


def test_bits_per_unit() -> None:
    assert bits_per_unit(math.log(2) * 8, 4) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="empty"):
        bits_per_unit(1.0, 0)
    with pytest.raises(ValueError, match="no scored"):
        TextLoss().result(str)


def test_text_loss_scores_every_token_once_and_counts_decoded_bytes() -> None:
    """A model whose log-probabilities are known (uniform over V): the loss is ln V per token, so
    bits per byte = tokens * log2 V / bytes, over both documents (Korean and English)."""
    import torch

    from megatron_scale.evaluation.perplexity import text_loss

    tok = _byte_bpe()
    vocab = tok.get_vocab_size()
    seen: list[int] = []

    def uniform(ids: torch.Tensor) -> torch.Tensor:
        seen.append(ids.shape[1])
        return torch.zeros(ids.shape[0], ids.shape[1], vocab)

    docs = [KOREAN, ENGLISH]
    r = text_loss(uniform, lambda s: tok.encode(s).ids, tok.decode, docs, prefix_id=0, window=16)
    n = sum(len(tok.encode(d).ids) for d in docs)
    assert (r["docs"], r["tokens"]) == (2, n) and sum(seen) == n  # disjoint windows, each token once
    assert r["bytes"] == sum(len(d.encode("utf-8")) for d in docs) and r["chars"] == sum(map(len, docs))
    assert r["ppl"] == pytest.approx(vocab, rel=1e-5)
    assert r["bits_per_byte"] == pytest.approx(n * math.log2(vocab) / r["bytes"], rel=1e-5)
    first = text_loss(uniform, lambda s: tok.encode(s).ids, tok.decode, docs, prefix_id=0, max_tokens=1)
    assert first["docs"] == 1 and first["bytes"] == len(KOREAN.encode("utf-8"))

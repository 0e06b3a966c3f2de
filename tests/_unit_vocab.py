"""A hand-made byte-level vocabulary of the tiny models' size (96) for per-character / per-word
routing tests: one special token, the bytes of a few Hangul syllables (lead and continuation
bytes apart, and some merged as SmolLM2 merges them: lead+continuation, two continuations, space+
lead, a whole syllable), and ASCII. `encode` codes a string by longest match, so a syllable is 1 to
3 tokens; `write_tokenizer` saves it as a tokenizer.json that data/tokenizer.py token_bytes reads."""

from __future__ import annotations

import os

KOREAN = "한국어 hello, 세계장!"

_MERGED = [b"\xed\x95", b"\xb5\xad", b" \xec", b" \xeb", b"\xec\x9e\xa5", b" h", b"ello", b"\xea\xb3"]
_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n,!.?;:-'\"()"


def pieces(vocab: int = 96) -> list[bytes]:
    """Token id -> bytes (b"" for the special token at id 0)."""
    hangul = sorted({b for ch in "한국어문장세계" for b in ch.encode("utf-8")})
    out = [b""] + [bytes([b]) for b in hangul] + _MERGED + [c.encode() for c in _ASCII]
    out = list(dict.fromkeys(out))[:vocab]
    assert len(out) == vocab, len(out)
    return out


def encode(text: str, table: list[bytes]) -> list[int]:
    """Greedy longest-match byte encoding with `table`."""
    data, ids, i = text.encode("utf-8"), [], 0
    index = {p: k for k, p in enumerate(table) if p}
    while i < len(data):
        for n in range(min(4, len(data) - i), 0, -1):
            if data[i : i + n] in index:
                ids.append(index[data[i : i + n]])
                i += n
                break
        else:
            raise ValueError(f"byte {data[i]:#x} is not in the vocabulary")
    return ids


def write_tokenizer(folder: str, table: list[bytes]) -> str:
    """`table` as a byte-level BPE tokenizer.json (GPT-2 byte alphabet, no merges; id 0 special)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from megatron_scale.data.tokenizer import _byte_of_char

    char_of = {b: c for c, b in _byte_of_char().items()}
    vocab = {"<|endoftext|>": 0, **{"".join(char_of[b] for b in p): k for k, p in enumerate(table) if p}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    return folder

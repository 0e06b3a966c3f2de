"""Tokenizers for data preparation, all read from local files (nothing is downloaded).

    HuggingFaceTokenizer    a tokenizer.json, or a folder holding one (Llama-3's, or one made
                            by `train_byte_bpe`)
    SentencePieceTokenizer  a SentencePiece .model file; end-of-document is its </s>

End of document (what --append-eod appends) is not always the eos_token: an Instruct
tokenizer's eos_token ends a chat turn (SmolLM2's `<|im_end|>`, Llama 3 Instruct's `<|eot_id|>`)
while its vocabulary keeps the pre-training document end (`<|endoftext|>`, `<|end_of_text|>`).
A known document-end token wins over the eos_token; `--eod-token` names another.

Both encode without special tokens: a document's token ids are its text's, and --append-eod
adds the end-of-document id. `TokenizerSpec` is the picklable description workers rebuild the
tokenizer from. The module imports neither torch nor megatron, so worker processes start fast.

`token_bytes` reads the bytes of every token of a byte-level BPE (SmolLM2's, Llama 3's,
`train_byte_bpe`'s); a `TokenFile` (a tokenizer as a flag named it) hands them to a training method
(methods/scale.py: the codes a SCALE-Route model deciding per character or word needs, by
model/layers/route_units.py's rule; route_eval/units.py: the sweep's).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from megatron_scale.durable import atomic_write

TOKENIZER_TYPES = ("HuggingFaceTokenizer", "SentencePieceTokenizer")
EOD_CANDIDATES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>")  # document ends, in order of preference
BPE_EOD = "<|endoftext|>"


class Tokenizer(Protocol):
    vocab_size: int
    eod: int
    eod_token: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


@dataclass(frozen=True)
class TokenizerSpec:
    """--tokenizer-type, --tokenizer-model and --eod-token, checked; `load()` builds the tokenizer."""

    type: str
    model: str
    eod_token: str | None = None

    def __post_init__(self) -> None:
        if self.type not in TOKENIZER_TYPES:
            raise ValueError(f"--tokenizer-type {self.type}: expected one of {', '.join(TOKENIZER_TYPES)}")
        if not os.path.exists(self.model):
            raise ValueError(f"--tokenizer-model {self.model}: no such file or folder")

    def load(self) -> Tokenizer:
        if self.type == "HuggingFaceTokenizer":
            return HuggingFaceTokenizer(self.model, self.eod_token)
        return SentencePieceTokenizer(self.model, self.eod_token)


class HuggingFaceTokenizer:
    def __init__(self, path: str, eod_token: str | None = None) -> None:
        from tokenizers import Tokenizer as _Tok

        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise ValueError(f"--tokenizer-model {path}: no tokenizer.json in the folder")
        try:
            self._tok = _Tok.from_file(file)
        except Exception as e:  # the tokenizers library raises plain Exceptions on bad files
            raise ValueError(f"--tokenizer-model {file}: not a Hugging Face tokenizer.json ({e})") from e
        self.path = path
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eod_token = eod_token or self._document_end(path)
        eod = self._tok.token_to_id(self.eod_token)
        if eod is None:
            raise ValueError(f"--eod-token {self.eod_token!r}: not a token of --tokenizer-model {path}")
        self.eod: int = eod

    def _document_end(self, path: str) -> str:
        """A known document-end token of the vocabulary, else tokenizer_config.json's eos_token."""
        for name in EOD_CANDIDATES:
            if self._tok.token_to_id(name) is not None:
                return name
        eos = _eos_token(path)
        if eos is not None and self._tok.token_to_id(eos) is not None:
            return eos
        raise ValueError(f"--tokenizer-model {path}: no end-of-document token (none of {', '.join(EOD_CANDIDATES)}, "
                         "no eos_token in tokenizer_config.json); name one with --eod-token")

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def _eos_token(path: str) -> str | None:
    config = os.path.join(path if os.path.isdir(path) else os.path.dirname(path), "tokenizer_config.json")
    if not os.path.isfile(config):
        return None
    with open(config, encoding="utf-8") as f:
        eos = json.load(f).get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) else None


class SentencePieceTokenizer:
    def __init__(self, path: str, eod_token: str | None = None) -> None:
        import sentencepiece

        try:
            self._sp = sentencepiece.SentencePieceProcessor(model_file=path)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"--tokenizer-model {path}: not a SentencePiece model ({e})") from e
        self.path = path
        self.vocab_size = self._sp.get_piece_size()
        self.eod = self._sp.eos_id() if eod_token is None else self._sp.piece_to_id(eod_token)
        if eod_token is not None and self._sp.id_to_piece(self.eod) != eod_token:
            raise ValueError(f"--eod-token {eod_token!r}: not a piece of --tokenizer-model {path}")
        if self.eod < 0:
            raise ValueError(f"--tokenizer-model {path}: the SentencePiece model has no </s> (eos) piece; "
                             "name one with --eod-token")
        self.eod_token = self._sp.id_to_piece(self.eod)

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(texts)

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.decode([int(i) for i in ids])


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes(tokenizer: str | os.PathLike) -> list[bytes]:
    """The bytes of every token id of a byte-level BPE tokenizer.json (or a folder holding one);
    b"" for special and added tokens."""
    from tokenizers import Tokenizer

    file = os.path.join(tokenizer, "tokenizer.json") if os.path.isdir(tokenizer) else str(tokenizer)
    if not os.path.isfile(file):
        raise ValueError(f"--tokenizer {tokenizer}: no tokenizer.json")
    tok = Tokenizer.from_file(file)
    table = _byte_of_char()
    added = set(tok.get_added_tokens_decoder())
    out = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        piece = tok.id_to_token(i)
        if i in added or piece is None or not all(c in table for c in piece):
            out.append(b"")
        else:
            out.append(bytes(table[c] for c in piece))
    if not any(out):
        raise ValueError(f"--tokenizer {tokenizer}: not a byte-level BPE tokenizer (no token maps to bytes)")
    return out


@dataclass(frozen=True)
class TokenFile:
    """A tokenizer.json (or a folder holding one) as the flag `flag` gave it (None: not given):
    where a model takes its per-token tables from (TrainingMethod.attach: a Route model's unit
    codes, the scoped output rows), read only when it needs them."""

    path: str | os.PathLike | None
    flag: str = "--tokenizer"

    def token_bytes(self) -> list[bytes]:
        """The bytes of every token id (token_bytes: one ValueError where it is not a byte-level BPE)."""
        if self.path is None:
            raise ValueError(f"{self.flag}: not given")
        return token_bytes(self.path)


def train_byte_bpe(texts: Iterable[str], vocab_size: int, out_dir: str, min_frequency: int = 2) -> str:
    """Train a byte-level BPE (GPT-2 style: every byte is a token, so any text round-trips) on
    `texts` and write `out_dir/tokenizer.json` + `tokenizer_config.json`, loadable here as
    HuggingFaceTokenizer and by transformers' PreTrainedTokenizerFast. Returns out_dir."""
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise ValueError(f"--vocab-size {vocab_size}: a byte-level BPE needs at least 257 (256 bytes + {BPE_EOD})")
    tok = _Tok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[BPE_EOD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "tokenizer.json"), tok.to_str().encode("utf-8"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": BPE_EOD, "bos_token": None,
              "model_max_length": 1 << 30, "clean_up_tokenization_spaces": False}
    atomic_write(os.path.join(out_dir, "tokenizer_config.json"), json.dumps(config, indent=2).encode("utf-8"))
    return out_dir

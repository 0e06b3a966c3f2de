"""What one worker does to one record: decode, normalise, filter, split, tokenise.

A pure function of the record and the settings, so any number of workers produces the same
output. This module imports neither torch nor megatron: spawned workers start in well under a
second, and a Korean splitter is loaded only by workers that meet Korean text.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from megatron_scale.data.files import Record, expand_inputs, read_documents
from megatron_scale.data.sentences import splitter
from megatron_scale.data.tokenizer import Tokenizer, TokenizerSpec

# Reasons a record is skipped. The first five are bad input: --strict stops on them.
INVALID_JSON = "invalid JSON"
NOT_UTF8 = "not UTF-8"
MISSING_KEY = "missing key"
NOT_TEXT = "not a string"
EMPTY = "empty"
TOO_SHORT = "shorter than --min-chars"
DUPLICATE = "exact duplicate"
BAD_INPUT = (INVALID_JSON, NOT_UTF8, MISSING_KEY, NOT_TEXT, EMPTY)


@dataclass(frozen=True)
class Settings:
    tokenizer: TokenizerSpec
    keys: tuple[str, ...] = ("text",)
    split_sentences: bool = False
    lang: str = "auto"
    min_chars: int = 0
    append_eod: bool = False
    nfc: bool = True


@dataclass
class Doc:
    """One document of one key: its digest (for exact-duplicate removal) and token ids, cut into
    sentences by `lengths` (one length when not splitting)."""

    digest: bytes
    ids: np.ndarray
    lengths: list[int]
    chars: int


@dataclass
class Skip:
    reason: str
    detail: str = ""


@dataclass
class Worker:
    settings: Settings
    tokenizer: Tokenizer = field(init=False)

    def __post_init__(self) -> None:
        self.tokenizer = self.settings.tokenizer.load()
        self._split = splitter(self.settings.lang) if self.settings.split_sentences else None

    def document(self, text: str) -> Doc | Skip:
        s = self.settings
        if s.nfc:
            text = unicodedata.normalize("NFC", text)
        if not text.strip():
            return Skip(EMPTY)
        if len(text.strip()) < s.min_chars:
            return Skip(TOO_SHORT)
        pieces = self._split(text) if self._split else [text]
        ids = [self.tokenizer.encode(p) for p in pieces]
        if s.append_eod:
            ids[-1] = [*ids[-1], self.tokenizer.eod]
        lengths = [len(x) for x in ids]
        flat = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=sum(lengths))
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        return Doc(digest, flat, lengths, len(text))

    def __call__(self, rec: Record) -> list[Doc | Skip]:
        return [t if isinstance(t, Skip) else self.document(t) for t in record_texts(rec, self.settings.keys)]


def record_texts(rec: Record, keys: tuple[str, ...]) -> list[str | Skip]:
    """The record's text under each key, or why there is none."""
    if rec.kind == "parquet":
        return [_as_text(rec.payload.get(k), k) for k in keys]
    try:
        raw = rec.payload.decode("utf-8")
    except UnicodeDecodeError as e:
        return [Skip(NOT_UTF8, f"byte {e.start}")] * len(keys)
    if rec.kind != "jsonl":
        return [raw] * len(keys)
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        return [Skip(INVALID_JSON, e.msg)] * len(keys)
    if not isinstance(obj, dict):
        return [Skip(INVALID_JSON, "not an object")] * len(keys)
    return [_as_text(obj[k], k) if k in obj else Skip(MISSING_KEY, repr(k)) for k in keys]


def corpus_texts(inputs: list[str], *, keys: tuple[str, ...] = ("text",), text_unit: str = "file") -> Iterator[str]:
    """Every readable text of the inputs, NFC-normalised (bad records left out): for tokenizer training."""
    for path in expand_inputs(inputs):
        for rec in read_documents(path, keys=list(keys), text_unit=text_unit):
            for t in record_texts(rec, keys):
                if isinstance(t, str) and t.strip():
                    yield unicodedata.normalize("NFC", t)


def _as_text(value: object, key: str) -> str | Skip:
    if value is None:
        return Skip(MISSING_KEY, repr(key))
    return value if isinstance(value, str) else Skip(NOT_TEXT, f"{key!r} is {type(value).__name__}")


# Worker-process entry points (multiprocessing pools call module-level functions).
_WORKER: Worker | None = None


def init_worker(settings: Settings) -> None:
    global _WORKER
    _WORKER = Worker(settings)


def work_chunk(records: list[Record]) -> list[list[Doc | Skip]]:
    assert _WORKER is not None, "init_worker was not called"
    return [_WORKER(r) for r in records]

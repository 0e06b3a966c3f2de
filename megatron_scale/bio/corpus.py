"""Tokenizer and Megatron indexed datasets (.bin/.idx) of the benchmark's texts."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from megatron_scale import _mcore as mc
from megatron_scale.durable import durable_replace
from megatron_scale.bio.texts import QA
from megatron_scale.data.tokenizer import Tokenizer, TokenizerSpec, train_byte_bpe


def build_tokenizer(texts: Sequence[str], vocab_size: int, out_dir: str) -> Tokenizer:
    """A byte-level BPE trained on the benchmark's own texts (written to `out_dir`)."""
    train_byte_bpe(texts, vocab_size, out_dir)
    return TokenizerSpec("HuggingFaceTokenizer", out_dir).load()


def write_dataset(prefix: str, docs: Sequence[Sequence[int]], eod: int) -> str:
    """Documents of token ids, each followed by end-of-document, as `prefix.bin/.idx`
    (built under .partial names, fsynced and moved into place when complete)."""
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    builder = mc.IndexedDatasetBuilder(f"{prefix}.bin.partial", dtype=np.int32)
    for ids in docs:
        t = torch.tensor([*ids, eod], dtype=torch.int32)
        builder.add_document(t, [len(t)])
    builder.finalize(f"{prefix}.idx.partial")
    durable_replace(f"{prefix}.bin.partial", f"{prefix}.bin")  # the .idx last: a dataset counts once it is there
    durable_replace(f"{prefix}.idx.partial", f"{prefix}.idx")
    return prefix


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    batch = getattr(tokenizer, "encode_batch", None)
    return batch(list(texts)) if batch else [tokenizer.encode(t) for t in texts]


def qa_texts(qas: Sequence[QA]) -> list[str]:
    return [qa.text for qa in qas]

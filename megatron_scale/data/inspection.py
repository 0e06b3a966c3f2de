"""What an indexed dataset holds: counts, length statistics, and sample documents decoded."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from megatron_scale.data.indexed import check_indexed_dataset
from megatron_scale.data.tokenizer import Tokenizer


@dataclass(frozen=True)
class Stats:
    prefix: str
    dtype: str
    documents: int
    sequences: int
    tokens: int
    doc_tokens_min: int
    doc_tokens_median: float
    doc_tokens_max: int
    bin_bytes: int

    def table(self) -> str:
        rows = [("dataset", self.prefix), ("token dtype", self.dtype), ("documents", f"{self.documents:,}"),
                ("sequences (sentences)", f"{self.sequences:,}"), ("tokens", f"{self.tokens:,}"),
                ("tokens per document (min / median / max)",
                 f"{self.doc_tokens_min:,} / {self.doc_tokens_median:,.0f} / {self.doc_tokens_max:,}"),
                (".bin size", f"{self.bin_bytes:,} bytes")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def open_dataset(prefix: str) -> object:
    from megatron_scale import _mcore as mc

    for ext in (".bin", ".idx"):
        if not os.path.isfile(prefix + ext):
            raise ValueError(f"{prefix}: no {prefix + ext} (give the dataset prefix, without .bin/.idx)")
    check_indexed_dataset(prefix)
    return mc.IndexedDataset(prefix)


def document_ids(ds: object, index: int) -> np.ndarray:
    """Token ids of document `index` (all its sentences, concatenated)."""
    docs = ds.document_indices
    if not 0 <= index < len(docs) - 1:
        raise IndexError(f"document {index}: the dataset has {len(docs) - 1} documents")
    parts = [ds[i] for i in range(int(docs[index]), int(docs[index + 1]))]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def stats(prefix: str) -> Stats:
    ds = open_dataset(prefix)
    lengths = np.asarray(ds.sequence_lengths, dtype=np.int64)
    docs = np.asarray(ds.document_indices, dtype=np.int64)
    per_doc = np.add.reduceat(lengths, docs[:-1]) if len(lengths) else np.zeros(0, dtype=np.int64)
    per_doc = np.where(docs[1:] > docs[:-1], per_doc, 0)  # reduceat repeats a value for empty docs
    return Stats(
        prefix=prefix, dtype=np.dtype(ds.index.dtype).name, documents=len(docs) - 1, sequences=len(lengths),
        tokens=int(lengths.sum()), doc_tokens_min=int(per_doc.min()) if len(per_doc) else 0,
        doc_tokens_median=float(np.median(per_doc)) if len(per_doc) else 0.0,
        doc_tokens_max=int(per_doc.max()) if len(per_doc) else 0, bin_bytes=os.path.getsize(prefix + ".bin"),
    )


def decode_documents(prefix: str, tokenizer: Tokenizer, indices: list[int], max_chars: int = 500) -> list[str]:
    ds = open_dataset(prefix)
    out = []
    for i in indices:
        text = tokenizer.decode(document_ids(ds, i))
        out.append(text if len(text) <= max_chars else text[:max_chars] + f" ... [{len(text) - max_chars} more chars]")
    return out


def decoded_size(prefix: str, tokenizer: Tokenizer) -> dict[str, int]:
    """{documents, tokens, bytes, chars} of a dataset: every stored token (end-of-document tokens
    too: a model's loss on the set predicts them) and the UTF-8 bytes and characters its documents
    decode to, each document decoded whole (a character cut across tokens counts once) with its
    end-of-document tokens, which carry no text, left out. tokens / bytes turns a per-token loss
    on the set into bits per byte (megatron_scale.evaluation.bpb)."""
    ds = open_dataset(prefix)
    documents = len(ds.document_indices) - 1
    tokens = n_bytes = chars = 0
    for i in range(documents):
        ids = document_ids(ds, i)
        tokens += len(ids)
        text = tokenizer.decode(int(t) for t in ids if int(t) != tokenizer.eod)
        n_bytes += len(text.encode("utf-8"))
        chars += len(text)
    if n_bytes == 0:
        raise ValueError(f"{prefix}: its documents decode to no text")
    return {"documents": documents, "tokens": tokens, "bytes": n_bytes, "chars": chars}

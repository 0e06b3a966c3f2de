"""Input corpora as records, and outputs written atomically.

Inputs are files, folders (walked, sorted) or globs, in three formats told apart by extension
after an optional .gz / .zst:

    .jsonl .json .ndjson   one JSON object per line; the text under --json-keys
    .parquet               the FineWeb2 layout: a `text` column (--json-keys names the columns)
    anything else          plain text: one document per file, paragraph or line (--text-unit)

A record is (source file, line or row number, payload). JSONL payloads stay bytes until a worker
parses them, so decoding errors are found, counted and named where the work is done.
"""

from __future__ import annotations

import glob
import gzip
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

JSONL_EXT = (".jsonl", ".json", ".ndjson")
TEXT_UNITS = ("file", "paragraph", "line")


@dataclass(frozen=True)
class Record:
    source: str
    line: int  # 1-based line (JSONL, text lines/paragraphs) or row (Parquet); 0: the whole file
    kind: str  # "jsonl" | "text" (payload: bytes) | "parquet" (payload: dict key -> value)
    payload: Any


def _strip_compression(path: str) -> tuple[str, str | None]:
    for ext in (".gz", ".zst"):
        if path.endswith(ext):
            return path[: -len(ext)], ext
    return path, None


def input_format(path: str) -> str:
    base, _ = _strip_compression(path.lower())
    if base.endswith(JSONL_EXT):
        return "jsonl"
    if base.endswith(".parquet"):
        return "parquet"
    return "text"


def expand_inputs(patterns: list[str]) -> list[str]:
    """Files named by --input (files, folders walked recursively, globs), sorted, each once.
    A pattern that names nothing is an error before any work starts."""
    files: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        found = []
        for m in matches:
            if os.path.isdir(m):
                for root, dirs, names in os.walk(m):
                    dirs.sort()
                    found += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
            elif os.path.isfile(m):
                found.append(m)
        if not found:
            raise ValueError(f"--input {pattern}: no such file, folder or match")
        files += found
    seen: set[str] = set()
    return [f for f in files if not (f in seen or seen.add(f))]


def open_binary(path: str) -> io.BufferedIOBase:
    """The file's bytes, decompressed when it ends in .gz or .zst."""
    _, comp = _strip_compression(path)
    if comp == ".gz":
        return gzip.open(path, "rb")
    if comp == ".zst":
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def read_documents(path: str, *, keys: list[str], text_unit: str = "file") -> Iterator[Record]:
    fmt = input_format(path)
    if fmt == "parquet":
        yield from _parquet_records(path, keys)
        return
    with open_binary(path) as f:
        if fmt == "jsonl":
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield Record(path, n, fmt, line)
            return
        data = f.read()
    if text_unit == "file":
        yield Record(path, 0, fmt, data)
    elif text_unit == "line":
        for n, line in enumerate(data.split(b"\n"), 1):
            yield Record(path, n, fmt, line)
    else:  # paragraphs: blocks separated by blank lines, numbered by their first line
        line = 1
        for block in re.split(rb"(\r?\n[ \t]*\r?\n)", data):
            if block.strip() and not re.fullmatch(rb"\r?\n[ \t]*\r?\n", block):
                lead = len(block) - len(block.lstrip(b"\r\n"))
                yield Record(path, line + block[:lead].count(b"\n"), fmt, block)
            line += block.count(b"\n")


def _parquet_records(path: str, keys: list[str]) -> Iterator[Record]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    missing = [k for k in keys if k not in pf.schema_arrow.names]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r} (--json-keys); columns: {', '.join(pf.schema_arrow.names)}")
    row = 0
    for batch in pf.iter_batches(columns=keys, batch_size=4096):
        cols = {k: batch.column(k).to_pylist() for k in keys}
        for i in range(batch.num_rows):
            row += 1
            yield Record(path, row, "parquet", {k: cols[k][i] for k in keys})

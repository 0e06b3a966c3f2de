"""Raw corpora to Megatron indexed datasets (.bin/.idx) that GPTDataset and BlendedDataset load.

Records are read in order in this process, tokenised by `workers` processes in chunks, and
written back in the original order, so the output bytes do not depend on the worker count.
Exact duplicates are removed here, in order, by a digest of the normalised text.

One dataset per --json-keys key, named as Megatron-LM's preprocess_data.py names them:
`{output_prefix}_{key}_{document|sentence}.bin/.idx`. Each is built under `.partial` names and
moved into place only when complete: the old .idx is removed first, then the .bin and finally
the .idx are renamed, so a crash leaves either the previous dataset or no .idx, never a
half-written one.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing as mp
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from megatron_scale.durable import durable_replace
from megatron_scale.data.files import Record, expand_inputs, read_documents
from megatron_scale.data.work import BAD_INPUT, DUPLICATE, Doc, Settings, Skip, Worker, init_worker, work_chunk


class DataError(ValueError):
    """Bad input under --strict: names the file and line."""


@dataclass
class KeySummary:
    prefix: str
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    chars: int = 0
    skipped: Counter = field(default_factory=Counter)


@dataclass
class Summary:
    files: int
    records: int
    seconds: float
    outputs: dict[str, KeySummary]
    eod: str | None = None
    """With --append-eod: the end-of-document token and its id."""

    def table(self) -> str:
        lines = [f"{self.files} files, {self.records} records in {self.seconds:.1f} s"]
        if self.eod is not None:
            lines.append(f"  every document ends with {self.eod} (--append-eod; --eod-token to change it)")
        for key, s in self.outputs.items():
            rate = s.tokens / max(self.seconds, 1e-9)
            lines.append(f"  [{key}] {s.documents} documents, {s.sentences} sentences, {s.tokens} tokens "
                         f"({s.documents / max(self.seconds, 1e-9):.0f} docs/s, {rate:.0f} tokens/s) -> {s.prefix}")
            for reason, n in sorted(s.skipped.items()):
                lines.append(f"      skipped {n}: {reason}")
        return "\n".join(lines)


def output_prefix(prefix: str, key: str, split_sentences: bool) -> str:
    return f"{prefix}_{key}_{'sentence' if split_sentences else 'document'}"


def _chunks(records: Iterator[Record], size: int) -> Iterator[list[Record]]:
    while chunk := list(islice(records, size)):
        yield chunk


class _Output:
    """One indexed dataset being written under .partial names."""

    def __init__(self, prefix: str, vocab_size: int) -> None:
        from megatron_scale import _mcore as mc

        self.prefix = prefix
        self.bin, self.idx = f"{prefix}.bin", f"{prefix}.idx"
        os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
        self.builder = mc.IndexedDatasetBuilder(self.bin + ".partial", dtype=mc.optimal_index_dtype(vocab_size))

    def add(self, doc: Doc) -> None:
        self.builder.add_document(doc.ids, doc.lengths)

    def commit(self) -> None:
        self.builder.finalize(self.idx + ".partial")
        # the .idx goes first and comes back last: a reader (and the recipe's record) never meets
        # a new .idx beside an old .bin; each move is durable (durable.durable_replace)
        if os.path.exists(self.idx):
            os.remove(self.idx)
        durable_replace(self.bin + ".partial", self.bin)
        durable_replace(self.idx + ".partial", self.idx)

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # a full disk fails the close's flush too
            self.builder.data_file.close()
        for path in (self.bin + ".partial", self.idx + ".partial"):
            if os.path.exists(path):
                os.remove(path)


def preprocess(
    inputs: list[str], output_prefix_: str, settings: Settings, *, workers: int = 1, text_unit: str = "file",
    strict: bool = False, dedup: bool = True, chunk_size: int = 64, progress: bool | None = None,
) -> Summary:
    """Tokenise `inputs` into one indexed dataset per key. Returns what was written and skipped."""
    if workers < 1:
        raise ValueError(f"--workers {workers}: must be at least 1")
    files = expand_inputs(inputs)
    tokenizer = settings.tokenizer.load()  # a bad tokenizer (or --eod-token) fails here, before any output
    vocab_size = tokenizer.vocab_size
    eod = f"{tokenizer.eod_token} (id {tokenizer.eod})" if settings.append_eod else None
    outs = {k: _Output(output_prefix(output_prefix_, k, settings.split_sentences), vocab_size) for k in settings.keys}
    summary = {k: KeySummary(o.prefix) for k, o in outs.items()}
    seen: dict[str, set[bytes]] = {k: set() for k in settings.keys}
    records = (r for f in files for r in read_documents(f, keys=list(settings.keys), text_unit=text_unit))
    start, n_records = time.perf_counter(), 0
    pool = mp.get_context("spawn").Pool(workers, init_worker, (settings,)) if workers > 1 else None
    if pool is None:
        worker = Worker(settings)
        results = (([worker(r) for r in c], c) for c in _chunks(records, chunk_size))
    else:
        results = _parallel(pool, _chunks(records, chunk_size), window=4 * workers)
    bar = _progress(progress)
    try:
        for outcomes, chunk in results:
            for rec, per_key in zip(chunk, outcomes):
                n_records += 1
                for key, out in zip(settings.keys, per_key):
                    s = summary[key]
                    if isinstance(out, Skip):
                        if strict and out.reason in BAD_INPUT:
                            where = f"{rec.source}:{rec.line}" if rec.line else rec.source
                            raise DataError(f"{where}: {out.reason}{' (' + out.detail + ')' if out.detail else ''} "
                                            f"[--strict; without it such records are skipped and counted]")
                        s.skipped[out.reason] += 1
                        continue
                    if dedup and out.digest in seen[key]:
                        s.skipped[DUPLICATE] += 1
                        continue
                    seen[key].add(out.digest)
                    outs[key].add(out)
                    s.documents += 1
                    s.sentences += len(out.lengths)
                    s.tokens += int(out.ids.size)
                    s.chars += out.chars
            if bar is not None:
                first = summary[settings.keys[0]]
                dt = max(time.perf_counter() - start, 1e-9)
                bar.update(len(chunk))
                bar.set_postfix_str(f"{first.documents / dt:.0f} docs/s, {first.tokens / dt:.0f} tokens/s", refresh=False)
        for o in outs.values():
            o.commit()
    except BaseException as e:
        for o in outs.values():
            o.abort()
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            names = ", ".join(f"{o.prefix}.bin/.idx" for o in outs.values())
            raise DataError(f"writing {names}: {os.strerror(e.errno)}; the partial files were removed and an "
                            "existing dataset of that name is as it was") from e
        raise
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        if bar is not None:
            bar.close()
    return Summary(len(files), n_records, time.perf_counter() - start, summary, eod)


def _parallel(pool: object, chunks: Iterator[list[Record]], window: int) -> Iterator[tuple[list, list[Record]]]:
    """Results of `work_chunk` in submission order, with at most `window` chunks in flight (so a
    large corpus is never read into memory ahead of the writer)."""
    inflight: deque = deque()
    for chunk in chunks:
        inflight.append((pool.apply_async(work_chunk, (chunk,)), chunk))
        if len(inflight) >= window:
            result, c = inflight.popleft()
            yield result.get(), c
    while inflight:
        result, c = inflight.popleft()
        yield result.get(), c


def _progress(enabled: bool | None):  # noqa: ANN202 - tqdm or None
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(unit=" docs", desc="preprocess", mininterval=1.0, file=sys.stderr)

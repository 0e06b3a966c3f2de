"""NSMC reviews (either form, nsmc_reader.py) to the four files of an NSMC folder, split by movie
(nsmc_split.py):

    train.jsonl     training text: a movie's reviews a document, {"text", "movie_id", "reviews"}
    heldout.jsonl   held-out text, the same form (bits per byte in the recipe's evaluations)
    bench.jsonl     the sentiment benchmark, a review a line: {"text", "label" (0 negative,
                    1 positive), "label_name", "rating", "movie_id", "id", "part" (dev | test)}
    splits.json     the seed and settings, the input's sha256, the movie ids of each split, the
                    counts, and each output file's sha256 (the benchmark task checks bench.jsonl
                    against it)

The input is read and checked whole before anything is written, so a bad file or line (one
error naming it) leaves the folder as it was. Each file is written under a temporary name and
moved into place; splits.json, which names the others' checksums, is removed first and moved in
last, so a folder with a splits.json holds one preparation's files and a crash leaves none.

The training and held-out text go to tools/preprocess_data.py like any Korean corpus: its
--lang auto finds them Korean (Hangul) and, with --split-sentences, kiwipiepy splits them, as it
does the konlpy and R&D sets.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from megatron_scale.durable import durable_replace, write_durably
from megatron_scale.data.nsmc_reader import ReadStats, Review, input_files, read_reviews
from megatron_scale.data.nsmc_split import LABEL_NAMES, SplitConfig, config_record, split

OUTPUTS = ("train.jsonl", "heldout.jsonl", "bench.jsonl")
RECORD = "splits.json"


def input_sha256(path: str) -> str:
    """sha256 of a JSON Lines file's bytes; of a raw/ folder, sha256 of its listing of
    "<file sha256>  <file name>" lines (sorted by name, as sha256sum writes them)."""
    form, files = input_files(path)
    digests = []
    for file in files:
        h = hashlib.sha256()
        with open(file, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        if form == "jsonl":
            return h.hexdigest()
        digests.append(f"{h.hexdigest()}  {os.path.basename(file)}\n")
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _jsonl(rows: Iterator[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def movie_documents(movies: list[str], by_movie: dict[str, list[Review]]) -> Iterator[dict[str, Any]]:
    """A document per movie: its reviews, stripped, a line each."""
    for m in movies:
        reviews = by_movie[m]
        yield {"text": "\n".join(r.text.strip() for r in reviews), "movie_id": m, "reviews": len(reviews)}


def _write_all(out: Path, files: dict[str, bytes]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = {name: out / f".{name}.partial-{os.getpid()}" for name in files}
    try:
        for name, data in files.items():
            write_durably(tmp[name], lambda f, data=data: f.write(data))
        (out / RECORD).unlink(missing_ok=True)
        for name in files:
            if name != RECORD:
                durable_replace(tmp[name], out / name, synced=True)
        durable_replace(tmp[RECORD], out / RECORD, synced=True)  # the record last
    finally:
        for path in tmp.values():
            path.unlink(missing_ok=True)


def prepare_nsmc(input_path: str, out_dir: str | os.PathLike, config: SplitConfig | None = None) -> dict[str, Any]:
    """Read `input_path`, split it, write the folder; return splits.json's record less the movie lists."""
    config = config or SplitConfig()
    stats = ReadStats()
    by_movie: dict[str, list[Review]] = {}
    for r in read_reviews(input_path, stats):
        by_movie.setdefault(r.movie_id, []).append(r)
    stats.seen.clear()
    s = split(by_movie, config)
    bench = [{"text": r.text.strip(), "label": label, "label_name": LABEL_NAMES[label], "rating": r.rating,
              "movie_id": r.movie_id, "id": r.id, "part": part} for part, r, label in s.bench]
    files = {"train.jsonl": _jsonl(movie_documents(s.train, by_movie)),
             "heldout.jsonl": _jsonl(movie_documents(s.heldout, by_movie)), "bench.jsonl": _jsonl(iter(bench))}

    def text_counts(movies: list[str]) -> dict[str, int]:
        return {"movies": len(movies), "reviews": sum(len(by_movie[m]) for m in movies),
                "chars": sum(len(r.text.strip()) for m in movies for r in by_movie[m])}

    def bench_counts(part: str, movies: list[str]) -> dict[str, int]:
        rows = [b for b in bench if b["part"] == part]
        return {"movies": len(movies), "movies_drawn": len({b["movie_id"] for b in rows}), "items": len(rows),
                **{name: sum(b["label"] == i for b in rows) for i, name in enumerate(LABEL_NAMES)}}

    record = {
        "seed": config.seed, "config": config_record(config),
        "input": {"path": os.path.abspath(input_path), "sha256": input_sha256(input_path), "files": stats.files,
                  "reviews": stats.reviews, "empty_reviews_left_out": stats.empty, "movies": len(by_movie)},
        "counts": {"train": text_counts(s.train), "heldout": text_counts(s.heldout),
                   "bench_dev": bench_counts("dev", s.dev), "bench_test": bench_counts("test", s.test)},
        "outputs": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        "movies": {"train": s.train, "heldout": s.heldout, "bench_dev": s.dev, "bench_test": s.test},
    }
    files[RECORD] = (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    _write_all(Path(out_dir), files)
    return {k: v for k, v in record.items() if k != "movies"}

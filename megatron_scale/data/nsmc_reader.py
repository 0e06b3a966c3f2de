"""The Naver sentiment movie corpus (NSMC) reviews, read from either of its two forms:

    JSON Lines      one review a line (plain, .gz or .zst), as /work/shared/data/nsmc ships it:
                    {"id", "movie_id", "rating", "date", "text"}
    raw/ folder     the corpus's own per-movie files (GitHub e9t/nsmc, raw/<movie_id>.json), each a
                    JSON list of {"review_id", "movie_id", "author", "review", "rating", "date"}

Both give the same `Review`s (the raw form's review_id and review are id and text; its masked
author is dropped; its ratings are strings there, integers here). A line of the JSON Lines, or an
object of a raw file, that is not a review is one `NsmcError` naming the file and line (for a raw
file, the line its object starts on), as is a review id seen twice: nothing is skipped silently.
Reviews whose text is empty after stripping are not errors (the corpus has none); `read_reviews`
leaves them out and counts them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from megatron_scale.data.files import open_binary


class NsmcError(ValueError):
    """A bad input file or line: the message names it (FILE:LINE)."""


@dataclass(frozen=True, slots=True)
class Review:
    """One review."""

    id: str
    """The review's id (unique in the corpus)."""
    movie_id: str
    """The movie it reviews."""
    rating: int
    """The reviewer's rating, 1 to 10."""
    date: str
    """As the site wrote it (YY.MM.DD)."""
    text: str
    """The review as written."""


# field of Review -> the names it has in the JSON Lines form and in the raw form
_NAMES = {"id": ("id", "review_id"), "movie_id": ("movie_id",), "rating": ("rating",), "date": ("date",),
          "text": ("text", "review")}


def review_from(obj: object, where: str) -> Review:
    """A Review from one decoded object of either form; NsmcError naming `where` if it is not one."""
    if not isinstance(obj, dict):
        raise NsmcError(f"{where}: not a review object (a JSON {type(obj).__name__})")
    values: dict[str, object] = {}
    for name, keys in _NAMES.items():
        key = next((k for k in keys if k in obj), None)
        if key is None:
            raise NsmcError(f"{where}: no {' or '.join(repr(k) for k in keys)}")
        values[name] = obj[key]
    for name in ("id", "movie_id"):
        v = values[name]
        if isinstance(v, bool) or not isinstance(v, (str, int)) or str(v).strip() == "":
            raise NsmcError(f"{where}: {name} {v!r} is not an id")
        values[name] = str(v)
    for name in ("date", "text"):
        if not isinstance(values[name], str):
            raise NsmcError(f"{where}: {name} is a {type(values[name]).__name__}, not a string")
    rating = values["rating"]
    if isinstance(rating, str) and rating.strip().isdigit():
        rating = int(rating)
    if isinstance(rating, bool) or not isinstance(rating, int) or not 1 <= rating <= 10:
        raise NsmcError(f"{where}: rating {values['rating']!r} is not an integer from 1 to 10")
    values["rating"] = rating
    return Review(**values)  # type: ignore[arg-type]  # values checked field by field above, a dict[str, object] to mypy


def _jsonl_reviews(path: str) -> Iterator[tuple[int, Review]]:
    with open_binary(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise NsmcError(f"{where}: not UTF-8 (byte {e.start})") from None
            except json.JSONDecodeError as e:
                raise NsmcError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
            yield n, review_from(obj, where)


def _raw_file_reviews(path: str) -> Iterator[tuple[int, Review]]:
    """One raw/<movie>.json: a JSON list, decoded object by object so each error names the line
    its object starts on."""
    try:
        with open_binary(path) as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise NsmcError(f"{path}: not UTF-8 (byte {e.start})") from None
    decoder = json.JSONDecoder()
    line, pos = 1, 0

    def skip(i: int) -> int:
        nonlocal line
        while i < len(text) and text[i] in " \t\r\n":
            line += text[i] == "\n"
            i += 1
        return i

    def fail(i: int, what: str) -> NsmcError:
        return NsmcError(f"{path}:{line}: not a raw NSMC file, a JSON list of reviews ({what} at column "
                         f"{i - text.rfind(chr(10), 0, i)})")

    pos = skip(pos)
    if pos >= len(text) or text[pos] != "[":
        raise fail(pos, "expected '['")
    pos = skip(pos + 1)
    if pos < len(text) and text[pos] == "]":
        pos = skip(pos + 1)
    else:
        while True:
            try:
                obj, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                line = e.lineno
                raise NsmcError(f"{path}:{e.lineno}: not JSON ({e.msg} at column {e.colno})") from None
            yield line, review_from(obj, f"{path}:{line}")
            line += text.count("\n", pos, end)
            pos = skip(end)
            if pos < len(text) and text[pos] == ",":
                pos = skip(pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                pos = skip(pos + 1)
                break
            raise fail(pos, "expected ',' or ']'")
    if pos != len(text):
        raise fail(pos, "text after the list")


def input_files(path: str) -> tuple[str, list[str]]:
    """("jsonl", [path]) for a file, ("raw", its *.json files sorted) for a folder; NsmcError if
    neither (a folder without .json files, a path that does not exist)."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
        if not files:
            raise NsmcError(f"--input {path}: a folder without raw NSMC files (*.json)")
        return "raw", files
    if os.path.isfile(path):
        return "jsonl", [path]
    raise NsmcError(f"--input {path}: no such file or folder")


@dataclass
class ReadStats:
    """What read_reviews saw."""

    files: int = 0
    reviews: int = 0
    """Reviews returned."""
    empty: int = 0
    """Reviews left out because their text is empty (after stripping)."""
    seen: dict[str, int] = field(default_factory=dict, repr=False)
    """review id -> where it was read (file index << 32 | line), to name both places of a duplicate."""


def read_reviews(path: str, stats: ReadStats | None = None) -> Iterator[Review]:
    """Every review of `path` (either form: a JSON Lines file or a raw/ folder), in file order;
    `stats`, when given, is filled in as they are read."""
    stats = stats if stats is not None else ReadStats()
    form, files = input_files(path)
    read = _jsonl_reviews if form == "jsonl" else _raw_file_reviews
    for i, file in enumerate(files):
        stats.files += 1
        for line, review in read(file):
            first = stats.seen.get(review.id)
            if first is not None:
                raise NsmcError(f"{file}:{line}: review id {review.id} again (first at {files[first >> 32]}:"
                                f"{first & 0xFFFFFFFF})")
            stats.seen[review.id] = i << 32 | line
            if not review.text.strip():
                stats.empty += 1
                continue
            stats.reviews += 1
            yield review

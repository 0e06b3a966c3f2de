"""NSMC preparation (megatron_scale/data/nsmc_*.py, tools/prepare_nsmc.py) on hand-made files:

- the raw/ folder and the JSON Lines (plain and zstd) of the same reviews give the same folder,
  byte for byte (splits.json differs only in the input it names);
- no movie's reviews are in two of training text, held-out text, the benchmark's dev and test
  parts; the benchmark is balanced, its labels follow the ratings, at most max_per_movie a label
  per movie;
- the split is fixed by the seed (again: the same bytes; another seed: other movies);
- a malformed line, a malformed raw file and a duplicate review id are each one error naming the
  file and line, the tool exits 2, and a folder prepared before is left as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from megatron_scale.data.nsmc_prepare import prepare_nsmc
from megatron_scale.data.nsmc_reader import NsmcError, read_reviews
from tests.data import _nsmc

ROOT = Path(__file__).resolve().parents[2]


def _tool(argv: list[str]) -> int:
    spec = importlib.util.spec_from_file_location("_tool_prepare_nsmc", ROOT / "tools" / "prepare_nsmc.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool.main(argv)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("nsmc")
    rows = _nsmc.reviews()
    return {"raw": _nsmc.write_raw(d / "raw", rows), "jsonl": _nsmc.write_jsonl(d / "reviews.jsonl", rows),
            "zst": _nsmc.write_jsonl(d / "reviews.jsonl.zst", rows, zstd=True)}


def test_both_forms_read_and_split_alike(inputs: dict[str, Path], tmp_path: Path) -> None:
    raw = list(read_reviews(str(inputs["raw"])))
    assert raw == list(read_reviews(str(inputs["jsonl"]))) == list(read_reviews(str(inputs["zst"])))
    assert len(raw) == 480 and raw[0].rating in range(1, 11) and isinstance(raw[0].rating, int)
    outs = {}
    for form, path in inputs.items():
        outs[form] = prepare_nsmc(str(path), tmp_path / form, _nsmc.SMALL)
    files = {form: _files(tmp_path / form) for form in inputs}
    for name in ("train.jsonl", "heldout.jsonl", "bench.jsonl"):
        assert files["raw"][name] == files["jsonl"][name] == files["zst"][name], name
    assert not [n for f in files.values() for n in f if "partial" in n]
    records = {form: json.loads(files[form]["splits.json"]) for form in inputs}
    assert records["raw"]["movies"] == records["jsonl"]["movies"] and records["raw"]["counts"] == records["zst"]["counts"]
    assert records["jsonl"]["input"]["sha256"] == hashlib.sha256(inputs["jsonl"].read_bytes()).hexdigest()
    assert records["raw"]["input"]["files"] == 40 and records["jsonl"]["input"]["files"] == 1
    for name in ("train.jsonl", "heldout.jsonl", "bench.jsonl"):  # the record names each output's checksum
        assert records["zst"]["outputs"][name] == hashlib.sha256(files["zst"][name]).hexdigest()
    assert outs["raw"]["counts"] == records["raw"]["counts"]


def test_splits_are_movie_disjoint_and_the_benchmark_balanced(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    prepare_nsmc(str(inputs["jsonl"]), out, _nsmc.SMALL)
    record = json.loads((out / "splits.json").read_text())
    movies = {k: set(v) for k, v in record["movies"].items()}
    assert [len(movies[k]) for k in ("bench_test", "bench_dev", "heldout", "train")] == [8, 4, 4, 24]
    names = list(movies)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not movies[a] & movies[b], (a, b)
    assert set().union(*movies.values()) == {str(20000 + m) for m in range(40)}
    train, heldout, bench = (_jsonl(out / n) for n in ("train.jsonl", "heldout.jsonl", "bench.jsonl"))
    assert {d["movie_id"] for d in train} == movies["train"] and {d["movie_id"] for d in heldout} == movies["heldout"]
    by_id = {r.id: r for r in read_reviews(str(inputs["jsonl"]))}
    # a movie's document: its reviews, a line each, in the corpus's order
    doc = train[0]
    assert doc["text"].split("\n") == [r.text for r in by_id.values() if r.movie_id == doc["movie_id"]]
    assert sum(d["reviews"] for d in train) == record["counts"]["train"]["reviews"] == 24 * 12
    for part, key, per_label in (("dev", "bench_dev", 3), ("test", "bench_test", 6)):
        rows = [b for b in bench if b["part"] == part]
        assert {b["movie_id"] for b in rows} <= movies[key]
        assert [sum(b["label"] == k for b in rows) for k in (0, 1)] == [per_label, per_label]
        for b in rows:
            review = by_id[b["id"]]
            assert (b["text"], b["rating"], b["movie_id"]) == (review.text, review.rating, review.movie_id)
            assert b["label"] == (0 if review.rating <= 4 else 1 if review.rating >= 9 else None)
            assert b["label_name"] == ("negative", "positive")[b["label"]]
        for label in (0, 1):
            per_movie = [sum(b["movie_id"] == m and b["label"] == label for b in rows) for m in movies[key]]
            assert max(per_movie) <= _nsmc.SMALL.max_per_movie
    assert len({b["id"] for b in bench}) == len(bench)


def test_the_seed_fixes_the_split(inputs: dict[str, Path], tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    prepare_nsmc(str(inputs["raw"]), a, _nsmc.SMALL)
    prepare_nsmc(str(inputs["raw"]), b, _nsmc.SMALL)
    assert _files(a) == _files(b)
    prepare_nsmc(str(inputs["raw"]), c, dataclasses.replace(_nsmc.SMALL, seed=8))
    ma, mc = (json.loads((d / "splits.json").read_text())["movies"] for d in (a, c))
    assert ma["bench_test"] != mc["bench_test"] and json.loads((c / "splits.json").read_text())["seed"] == 8


def test_bad_lines_and_files_are_named_and_change_nothing(inputs: dict[str, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _tool(["--input", str(inputs["raw"]), "--out", str(out)]) == 2  # defaults need a real corpus's size
    assert "fewer than the 100 asked for" in capsys.readouterr().err and not out.exists()
    prepare_nsmc(str(inputs["raw"]), out, _nsmc.SMALL)
    before = _files(out)
    rows = _nsmc.reviews()
    lines = _nsmc.jsonl_lines(rows)

    def fails(path: Path, match: str) -> None:
        assert _tool(["--input", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and match in err and len(err.strip().splitlines()) == 1, err
        with pytest.raises(NsmcError, match=re.escape(match.split(": ", 1)[0])):
            list(read_reviews(str(path)))
        assert _files(out) == before

    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:2], lines[2][:-5], *lines[3:]]) + "\n", encoding="utf-8")
    fails(bad, f"{bad}:3: not JSON")
    bad.write_text("\n".join([*lines[:4], lines[4].replace('"rating": ', '"rating": 1'), *lines[5:]]) + "\n")
    fails(bad, f"{bad}:5: rating")
    bad.write_text("\n".join([*lines[:6], lines[6].replace('"text"', '"txt"'), *lines[7:]]) + "\n")
    fails(bad, f"{bad}:7: no 'text' or 'review'")
    bad.write_text("\n".join([*lines, lines[1]]) + "\n")
    fails(bad, f"{bad}:{len(lines) + 1}: review id {rows[1]['review_id']} again (first at {bad}:2)")
    folder = _nsmc.write_raw(tmp_path / "raw", rows)
    broken = folder / "20003.json"
    text = broken.read_text(encoding="utf-8")
    second = text.index('"rating": "', text.index('"rating": "') + 1)  # the second object's rating
    broken.write_text(text[:second] + '"rating": "x' + text[second + len('"rating": "'):], encoding="utf-8")
    start = text[:text.rindex("{", 0, second)].count("\n") + 1  # the line its object starts on
    assert start > 2
    fails(folder, f"{broken}:{start}: rating 'x")
    broken.write_text(text[:-3], encoding="utf-8")  # cut short
    fails(folder, f"{broken}:")
    broken.write_text('{"review": "a"}', encoding="utf-8")  # an object, not a list
    fails(folder, f"{broken}:1: not a raw NSMC file")
    assert _tool(["--input", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err

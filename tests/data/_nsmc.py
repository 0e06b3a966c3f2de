"""A hand-made NSMC in both of the corpus's forms: the raw/ folder of per-movie JSON lists (the
GitHub layout: review_id, movie_id, author, review, rating as a string, date) and the JSON Lines
of the same reviews (id, movie_id, rating, date, text), plain or zstd. Small split settings fit it."""

from __future__ import annotations

import json
import random
from pathlib import Path

from megatron_scale.data.nsmc_split import SplitConfig

GOOD = ["최고의 영화", "정말 재밌어요", "감동적이다", "배우 연기가 좋았다", "또 보고 싶다"]
BAD = ["최악이다", "시간 아깝다", "지루해요", "돈이 아깝다", "별로였음"]
MIDDLE = ["그냥 그랬다", "볼만함", "보통"]

SMALL = SplitConfig(seed=7, test_share=0.2, dev_share=0.1, heldout_share=0.1, test_per_label=6, dev_per_label=3,
                    max_per_movie=2)
"""Fits 40 movies: 8 test, 4 dev, 4 held-out, 24 training."""


def reviews(movies: int = 40, per_movie: int = 12, seed: int = 0) -> list[dict]:
    """Reviews in the raw form, grouped by movie, movie ids in file order."""
    rng = random.Random(seed)
    out, rid = [], 1000
    for m in range(movies):
        for k in range(per_movie):
            rating = rng.choice([1, 2, 3, 4, 5, 7, 9, 10, 10])
            words = BAD if rating <= 4 else GOOD if rating >= 9 else MIDDLE
            out.append({"review": f"{rng.choice(words)} {m}-{k}", "date": f"15.0{1 + k % 9}.1{k % 10}",
                        "rating": str(rating), "author": "abcd****", "review_id": str(rid), "movie_id": str(20000 + m)})
            rid += 1
    return out


def write_raw(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    by_movie: dict[str, list[dict]] = {}
    for r in rows:
        by_movie.setdefault(r["movie_id"], []).append(r)
    for movie, items in by_movie.items():
        (folder / f"{movie}.json").write_text(json.dumps(items, ensure_ascii=False, indent=2), encoding="utf-8")
    return folder


def jsonl_lines(rows: list[dict]) -> list[str]:
    return [json.dumps({"id": r["review_id"], "movie_id": r["movie_id"], "rating": int(r["rating"]), "date": r["date"],
                        "text": r["review"]}, ensure_ascii=False) for r in rows]


def write_jsonl(path: Path, rows: list[dict], zstd: bool = False) -> Path:
    data = ("\n".join(jsonl_lines(rows)) + "\n").encode("utf-8")
    if zstd:
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path

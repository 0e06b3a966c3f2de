"""NSMC split by movie into training text, held-out text and a sentiment benchmark.

Movies (not reviews) are dealt out: the sorted movie ids are shuffled by random.Random(seed) and
cut into, in this order, the benchmark's test movies, its dev movies, the held-out movies and the
training movies. So no movie's reviews are in two of training text, held-out text and benchmark,
and the benchmark's dev part (for choosing a prompt form) shares no movie with its test part
(the frozen benchmark). The split depends only on the seed and the set of movie ids: the corpus's
raw/ folder and the JSON Lines of the same reviews split alike.

Documents are a movie's reviews, one review a line, in the corpus's order (the site's, newest
first). Why per movie and not per review: the reviews are short (median 27 characters; every
movie has at most 100 reviews), so a review per document would spend a document-end token and a
context-free start on every dozen tokens or so; exact-duplicate removal (tools/preprocess_data.py
removes repeated documents) would drop 23,876 reviews such as "굿" (921 times) and "최고" (483)
and change the text's distribution; and a window of one movie's reviews gives a model related
context (its title, actors, plot) as a document of prose would. Ratings are not in the text.

The benchmark is balanced zero-shot sentiment: ratings 1-4 are negative (label 0), 9-10
positive (label 1), 5-8 unused (the corpus's own sentiment split drops them too). Each part draws
the same number of reviews of each label from its movies (seeded; at most `max_per_movie` of a
label from one movie, so a few popular movies do not make the benchmark), so a constant answer
scores 50%.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from megatron_scale.data.nsmc_reader import NsmcError, Review

NEGATIVE = range(1, 5)
"""Ratings read as negative (label 0)."""
POSITIVE = range(9, 11)
"""Ratings read as positive (label 1)."""
LABEL_NAMES = ("negative", "positive")


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """How the movies are dealt out and the benchmark drawn."""

    seed: int = 1234
    """Seed of the movie shuffle and of the benchmark's draw."""
    test_share: float = 0.05
    """Share of the movies whose reviews make the benchmark's test part."""
    dev_share: float = 0.025
    """Share of the movies whose reviews make the benchmark's dev part (prompt choice)."""
    heldout_share: float = 0.025
    """Share of the movies whose reviews are held-out text (bits per byte)."""
    test_per_label: int = 500
    """Test reviews of each label (the test part has twice as many)."""
    dev_per_label: int = 100
    """Dev reviews of each label."""
    max_per_movie: int = 5
    """At most this many reviews of one label from one movie, in either part."""

    def __post_init__(self) -> None:
        shares = (self.test_share, self.dev_share, self.heldout_share)
        if any(not 0 < s < 1 for s in shares) or sum(shares) >= 1:
            raise ValueError(f"split shares {shares}: each in (0, 1), together under 1 (the rest trains)")
        if min(self.test_per_label, self.dev_per_label, self.max_per_movie) < 1:
            raise ValueError("test_per_label, dev_per_label and max_per_movie must be at least 1")


@dataclass(frozen=True)
class Splits:
    """Movie ids of each split, and the benchmark's reviews."""

    train: list[str]
    heldout: list[str]
    dev: list[str]
    test: list[str]
    bench: list[tuple[str, Review, int]]
    """(part, review, label) in a seeded order, dev part first."""


def label_of(rating: int) -> int | None:
    """0 (negative), 1 (positive), or None for a rating the benchmark leaves out."""
    return 0 if rating in NEGATIVE else 1 if rating in POSITIVE else None


def deal_movies(movies: Iterable[str], config: SplitConfig) -> dict[str, list[str]]:
    """{"test", "dev", "heldout", "train"}: the movie ids of each, each list sorted."""
    order = sorted(set(movies))
    if len(order) < 4:
        raise NsmcError(f"{len(order)} movies: at least 4 are needed (one per split)")
    random.Random(config.seed).shuffle(order)
    sizes = [max(1, round(s * len(order))) for s in (config.test_share, config.dev_share, config.heldout_share)]
    if sum(sizes) >= len(order):
        raise NsmcError(f"{len(order)} movies leave none for training at shares {sizes}")
    cuts = [0, sizes[0], sizes[0] + sizes[1], sum(sizes), len(order)]
    return {name: sorted(order[a:b]) for name, a, b in zip(("test", "dev", "heldout", "train"), cuts, cuts[1:])}


def draw_balanced(reviews: list[Review], per_label: int, max_per_movie: int, rng: random.Random,
                  part: str) -> list[tuple[Review, int]]:
    """`per_label` reviews of each label, at most `max_per_movie` of a label per movie."""
    out: list[tuple[Review, int]] = []
    for label in (0, 1):
        pool = sorted((r for r in reviews if label_of(r.rating) == label), key=lambda r: r.id)
        rng.shuffle(pool)
        taken: dict[str, int] = {}
        chosen = []
        for r in pool:
            if len(chosen) == per_label:
                break
            if taken.get(r.movie_id, 0) < max_per_movie:
                taken[r.movie_id] = taken.get(r.movie_id, 0) + 1
                chosen.append((r, label))
        if len(chosen) < per_label:
            raise NsmcError(f"the benchmark's {part} movies hold {len(chosen)} usable {LABEL_NAMES[label]} reviews "
                            f"(at most {max_per_movie} a movie), fewer than the {per_label} asked for")
        out += chosen
    rng.shuffle(out)
    return out


def split(by_movie: dict[str, list[Review]], config: SplitConfig) -> Splits:
    """Deal the movies out and draw the benchmark (see the module docstring)."""
    movies = deal_movies(by_movie, config)
    rng = random.Random(config.seed)
    bench: list[tuple[str, Review, int]] = []
    for part, per_label in (("dev", config.dev_per_label), ("test", config.test_per_label)):
        reviews = [r for m in movies[part] for r in by_movie[m]]
        bench += [(part, r, label) for r, label in draw_balanced(reviews, per_label, config.max_per_movie, rng, part)]
    return Splits(train=movies["train"], heldout=movies["heldout"], dev=movies["dev"], test=movies["test"],
                  bench=bench)


def config_record(config: SplitConfig) -> dict[str, object]:
    """The config as splits.json records it, with the label rule."""
    return {**asdict(config), "negative_ratings": [NEGATIVE.start, NEGATIVE.stop - 1],
            "positive_ratings": [POSITIVE.start, POSITIVE.stop - 1]}

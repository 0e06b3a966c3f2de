"""NSMC sentiment, a Korean zero-shot benchmark: is a movie review negative (rating 1-4) or
positive (9-10)? Scored as lm-evaluation-harness scores multiple choice (tasks.Item, scoring.py):
a label form's prompt, then each label word as a continuation (acc and acc_norm), or a channel
form's two prompts, then the review (acc only, as Winogrande), with the harness's standard error.

The items are tools/prepare_nsmc.py's bench.jsonl in the folder NSMC_DIR names (checked against
the sha256 its splits.json records): reviews of movies that are in neither the training nor the
held-out text, the same number of each label (a constant answer scores 50%). Two tasks:

    nsmc        the test part, the frozen benchmark
    nsmc_dev    the dev part (other movies), on which the prompt form was chosen
    nsmc_order  the test part's reviews as word-order minimal pairs: the review as written against
                its words in a seeded shuffled order, after the same prompt; the model should find
                the written order likelier (Korean fluency, not sentiment; SmolLM2-135M is at
                chance on sentiment in every form tried, docs/evaluation.md)

`FORMS` are the prompt and label-word forms tried on the dev part (docs/evaluation.md gives
their dev accuracies); `FROZEN` is the one chosen, the tasks' default variant. Another form is a
--variant away (`--variant nsmc_dev=ko_label`), for a dev sweep; a score with another form is not
the benchmark's. This is not the corpus's official test split (ratings_test.txt), and its scores
are not comparable with published NSMC accuracies.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megatron_scale.evaluation.items import Item, TaskError

ENV = "NSMC_DIR"
"""The environment variable naming the folder tools/prepare_nsmc.py wrote."""


@dataclass(frozen=True, kw_only=True)
class Form:
    """One prompt form: what is scored after what, for (negative, positive); {review} marks
    where the review's text goes. A label form scores two label words after one prompt; a channel
    form scores the review itself after two prompts (as the harness scores Winogrande: several
    contexts, one continuation), so no label word's own frequency decides."""

    contexts: tuple[str, str]
    """The context of each choice (the same for a label form)."""
    continuations: tuple[str, str]
    """The continuation of each choice, its leading space (the harness's target delimiter) included."""
    norm: bool = True
    """Whether acc_norm is reported: not for a channel form (its choices are prompts) nor for a form
    whose label words' lengths alone decide it (en_cloze: every review one way, measured)."""

    def item(self, row: dict[str, Any]) -> Item:
        fill = {"review": row["text"]}
        return Item(doc_id=str(row["id"]), contexts=tuple(c.format(**fill) for c in self.contexts),
                    continuations=tuple(c.format(**fill) for c in self.continuations), gold=int(row["label"]))


def _label(prompt: str, negative: str, positive: str, norm: bool = True) -> Form:
    return Form(contexts=(prompt, prompt), continuations=(f" {negative}", f" {positive}"), norm=norm)


def _channel(negative: str, positive: str) -> Form:
    return Form(contexts=(negative, positive), continuations=(" {review}", " {review}"), norm=False)


FORMS = {
    "ko_label": _label("리뷰: {review}\n감정:", "부정", "긍정"),
    "en_label": _label("Review: {review}\nSentiment:", "negative", "positive"),
    "ko_cloze": _label("{review}\n한마디로 이 영화는", "최악", "최고"),
    "en_cloze": _label("Movie review: {review}\nIn one word, the movie was", "terrible", "great", norm=False),
    "ko_channel": _channel("부정적인 영화 리뷰:", "긍정적인 영화 리뷰:"),
    "en_channel": _channel("A negative movie review:", "A positive movie review:"),
}
FROZEN = "en_cloze"
"""The form the benchmark uses, chosen on nsmc_dev with SmolLM2-135M-Instruct: the highest acc of the
six (56.5 +- 3.5 %; the others 48.5-52.5; docs/evaluation.md, "NSMC"). Its score is acc alone:
acc_norm would divide by the label words' lengths (" terrible" 9 characters, " great" 6), which
moved every answer to one side (50.0 on dev and test)."""
PARTS = {"nsmc": "test", "nsmc_dev": "dev", "nsmc_order": "test"}


def bench_dir(folder: str | os.PathLike | None = None) -> Path:
    """The NSMC folder: `folder`, else $NSMC_DIR; TaskError saying how to make one if neither."""
    given = folder or os.environ.get(ENV)
    if not given:
        raise TaskError(f"the nsmc tasks need the folder tools/prepare_nsmc.py writes: set {ENV}=DIR "
                        f"(python tools/prepare_nsmc.py --input reviews.jsonl.zst --out DIR)")
    path = Path(given)
    if not (path / "bench.jsonl").is_file() or not (path / "splits.json").is_file():
        raise TaskError(f"{ENV}={path}: no bench.jsonl and splits.json there (tools/prepare_nsmc.py --out writes them)")
    return path


def read_bench(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """bench.jsonl's rows, checked against splits.json's sha256; and splits.json."""
    bench, record = folder / "bench.jsonl", folder / "splits.json"
    try:
        splits = json.loads(record.read_text(encoding="utf-8"))
        want = splits["outputs"]["bench.jsonl"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TaskError(f"{record}: not tools/prepare_nsmc.py's record ({type(e).__name__}: {e})") from e
    data = bench.read_bytes()
    if hashlib.sha256(data).hexdigest() != want:
        raise TaskError(f"{bench}: its sha256 is not the one {record} records (changed since tools/prepare_nsmc.py "
                        "wrote it: prepare the folder again)")
    rows = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            if not isinstance(row["text"], str) or row["label"] not in (0, 1) or row["part"] not in ("dev", "test"):
                raise ValueError(f"text {row['text']!r}, label {row['label']!r}, part {row['part']!r}")
            str(row["id"])
        except (ValueError, KeyError, TypeError) as e:
            raise TaskError(f"{bench}:{n}: not a benchmark line ({type(e).__name__}: {e})") from e
        rows.append(row)
    return rows, splits


def items(rows: list[dict[str, Any]], part: str, form: str) -> list[Item]:
    """The part's reviews as multiple-choice items in the form `form`, in file order."""
    return [FORMS[form].item(r) for r in rows if r["part"] == part]


ORDER_PROMPT = "영화 리뷰:"
"""nsmc_order's context ("movie review:"), the same for both choices."""
ORDER_MIN_WORDS = 3
"""nsmc_order leaves out reviews of fewer distinct words (no order worth judging)."""


def shuffled_words(words: list[str], rng: random.Random) -> list[str] | None:
    """`words` in another order drawn from `rng` (None if no draw of 20 differs: all words alike)."""
    for _ in range(20):
        perm = list(words)
        rng.shuffle(perm)
        if perm != words:
            return perm
    return None


def order_items(rows: list[dict[str, Any]], part: str, seed: int) -> list[Item]:
    """nsmc_order's items: each review of `part` with at least ORDER_MIN_WORDS distinct words, as
    two continuations after ORDER_PROMPT, the written order and a shuffled one, in a seeded order
    (gold is the written one's place). Whitespace is normalised to single spaces in both, so the
    two continuations hold the same characters and, word by word, the same tokens."""
    out = []
    for r in rows:
        words = r["text"].split()
        if r["part"] != part or len(set(words)) < ORDER_MIN_WORDS:
            continue
        rng = random.Random(f"nsmc_order:{seed}:{r['id']}")
        other = shuffled_words(words, rng)
        if other is None:
            continue
        gold = rng.randrange(2)
        pair = [" " + " ".join(words), " " + " ".join(other)]
        if gold == 1:
            pair.reverse()
        out.append(Item(doc_id=str(r["id"]), contexts=(ORDER_PROMPT, ORDER_PROMPT), continuations=tuple(pair), gold=gold))
    return out


def load_nsmc(name: str, variant: str | None = None, folder: str | os.PathLike | None = None
              ) -> tuple[list[Item], dict[str, Any]]:
    """The items of task `name` (nsmc or nsmc_dev in form `variant`, default FROZEN; or
    nsmc_order), and where they came from, as tasks.load_task returns them."""
    order = name == "nsmc_order"
    form = "order" if order else FROZEN if variant in (None, "frozen") else variant
    if not order and form not in FORMS:
        raise TaskError(f"--variant {form}: {name}'s prompt forms are {', '.join(FORMS)} (the benchmark's: {FROZEN})")
    path = bench_dir(folder)
    rows, splits = read_bench(path)
    part = PARTS[name]
    if order:
        chosen = order_items(rows, part, int(splits.get("seed") or 0))
        what, kind = f"{part} reviews of {ORDER_MIN_WORDS}+ distinct words", "word-order pairs; "
    else:
        chosen = items(rows, part, form)
        what, kind = f"{part} items", ""
    if len(chosen) < 2:
        raise TaskError(f"{path / 'bench.jsonl'}: {len(chosen)} {what}")
    return chosen, {"source": f"NSMC {path / 'bench.jsonl'} ({part} part; {kind}movies in no training or held-out text)",
                    "variant": form, "split": part, "num_fewshot": 0,
                    "bench_sha256": splits["outputs"]["bench.jsonl"], "nsmc_seed": splits.get("seed"),
                    "acc_norm": not order and FORMS[form].norm}

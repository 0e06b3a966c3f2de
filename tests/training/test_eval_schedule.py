"""When a run evaluates (--eval-interval or an --eval-iterations schedule) and which windows it
evaluates: the training order follows --seed, the named evaluation sets' windows follow --eval-seed
(default --seed), so runs of several seeds can score the same windows. No ranks, no model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from megatron_scale.testing.runs import VOCAB, make_dataset
from megatron_scale.data.batches import build_datasets
from megatron_scale.training.metrics import LoggingConfig


def test_schedule_or_interval_decides_each_iteration() -> None:
    every = LoggingConfig(eval_interval=4)
    assert [i for i in range(13) if every.evaluates_at(i)] == [0, 4, 8, 12]
    assert [i for i in range(9) if LoggingConfig(eval_interval=4, eval_at_start=False).evaluates_at(i)] == [4, 8]
    dense = LoggingConfig(eval_iterations=(0, 2, 4, 8, 96))
    assert [i for i in range(100) if dense.evaluates_at(i)] == [0, 2, 4, 8, 96]
    assert not any(LoggingConfig().evaluates_at(i) for i in range(5))  # neither: never


def _windows(data: str, seed: int, eval_seed: int | None, tmp: Path) -> tuple[list[list[int]], list[list[int]]]:
    b = build_datasets(blend=([data], None), split="100,0,0", eval_sets={"ko": data}, seq_length=16, seed=seed,
                       eval_seed=eval_seed, vocab_size=VOCAB, train_samples=16, eval_samples=8, cache=str(tmp))
    train = [np.asarray(b.train[i]["tokens"]).tolist() for i in range(16)]
    ko = [np.asarray(b.evals["ko"][i]["tokens"]).tolist() for i in range(8)]
    return train, ko


def test_seed_orders_training_and_eval_seed_fixes_the_evaluated_windows(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "ko", seed=3)
    train_a, eval_a = _windows(data, 1, 1234, tmp_path / "c")
    train_b, eval_b = _windows(data, 2, 1234, tmp_path / "c")
    assert train_a != train_b  # --seed reorders the training samples
    assert eval_a == eval_b  # one --eval-seed: the same evaluation windows
    assert _windows(data, 1234, None, tmp_path / "c")[1] == eval_a  # --eval-seed's default is --seed
    assert _windows(data, 2, None, tmp_path / "c")[1] != eval_a

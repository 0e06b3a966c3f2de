"""megatron-core's dataset index cache, checked before it is trusted (data/index_cache.py): a
truncated array (a run killed while megatron-core wrote it) is removed with its group and
rebuilt, and the rebuilt dataset serves the same samples."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest


def _build(prefix: str) -> object:
    from megatron_scale.data.batches import build_datasets

    return build_datasets(blend=([prefix], None), split="90,10,0", eval_sets={}, seq_length=16, seed=1,
                          vocab_size=256, train_samples=40, eval_samples=4).train


def test_a_truncated_index_cache_is_rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from megatron_scale.testing.runs import make_dataset

    prefix = make_dataset(tmp_path / "ds", seed=3, docs=60)
    first = _build(prefix)
    cache = Path(prefix) / "cache" / "GPTDataset_indices"
    (shuffle,) = sorted(cache.glob("*-train-shuffle_index.npy"))
    whole = shuffle.read_bytes()
    os.truncate(shuffle, len(whole) - 8)  # the last write cut short
    capsys.readouterr()
    again = _build(prefix)
    said = capsys.readouterr().err
    assert f"dataset index cache {cache}/" in said and "its header needs" in said and "rebuilding it" in said
    assert shuffle.read_bytes() == whole  # rebuilt, the same
    assert all(np.array_equal(first[i]["tokens"], again[i]["tokens"]) for i in range(len(first)))  # type: ignore[index]
    capsys.readouterr()
    _build(prefix)
    assert "rebuilding" not in capsys.readouterr().err  # a whole cache is used as it is

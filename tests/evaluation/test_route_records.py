"""Route records of a SCALE checkpoint (evaluation/route_records.py): the windows they score are
the ones training's evaluation draws, and the next ones are held out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from megatron_scale.evaluation.route_records import eval_windows


def test_windows_are_the_ones_training_evaluates_and_the_next_ones_are_held_out(tmp_path: Path) -> None:
    import numpy as np

    from megatron_scale.testing.runs import VOCAB, make_dataset
    from megatron_scale.data.batches import build_datasets

    prefix = make_dataset(tmp_path / "d", seed=4, docs=40)
    # a run with --eval-iters 4 --global-batch-size 2 evaluates samples 0..7 of its eval set
    run = build_datasets(blend=([prefix], None), split="100,0,0", eval_sets={"ko": prefix}, seq_length=8, seed=1,
                         eval_seed=1234, vocab_size=VOCAB, train_samples=8, eval_samples=8, cache=str(tmp_path / "c"))
    evaluated = eval_windows(prefix, 8, 8)
    for i in range(8):
        item = run.evals["ko"][i]
        assert evaluated[i, :-1].tolist() == np.asarray(item["tokens"]).tolist()
        assert evaluated[i, 1:].tolist() == np.asarray(item["labels"]).tolist()
    held_out = eval_windows(prefix, 8, 8, skip=8)
    assert not ({tuple(w.tolist()) for w in evaluated} & {tuple(w.tolist()) for w in held_out})
    assert not torch.equal(eval_windows(prefix, 8, 8, seed=7), evaluated)  # another --eval-seed
    with pytest.raises(ValueError, match="fewer than the"):
        eval_windows(prefix, 8, 10_000)

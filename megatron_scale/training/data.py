"""Training and evaluation batches from Megatron indexed datasets (.bin/.idx).

megatron-core builds the datasets: GPTDataset per prefix, BlendedDataset for weighted blends,
split by --split into train/valid/test. Named evaluation sets (--eval-data-path en=... ko=...)
are whole datasets of their own. Sample order is a pure function of the iteration: global batch
i holds samples [i*GB, (i+1)*GB), microbatch m of data-parallel rank r the slice
m*mbs*dp + r*mbs. Resuming at a consumed-samples count therefore continues the exact stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from megatron_scale import _mcore as mc


class VocabOnlyTokenizer:
    """What GPTDataset needs of a tokenizer when the data is already tokenised: a vocabulary
    size, and ids for end-of-document and padding (-1: none; loss masking by EOD is off)."""

    def __init__(self, vocab_size: int, eod: int = -1, pad: int = -1) -> None:
        self.vocab_size = vocab_size
        self.eod = eod
        self.pad = pad
        self.unique_identifiers = {"class": "VocabOnlyTokenizer", "vocab_size": vocab_size}


@dataclass(kw_only=True)
class Batches:
    """Datasets of one run: train, and named evaluation sets (the split's valid set as 'valid')."""

    train: Any
    evals: dict[str, Any]


def _config(seq_length: int, seed: int, vocab_size: int, cache: str | None, **kw: Any) -> Any:
    return mc.GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, tokenizer=VocabOnlyTokenizer(vocab_size),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        create_attention_mask=False, path_to_cache=cache, **kw,
    )


def build_datasets(
    *, blend: tuple[list[str], list[float] | None], split: str, eval_sets: dict[str, str],
    seq_length: int, seed: int, vocab_size: int, train_samples: int, eval_samples: int,
    cache: str | None = None,
) -> Batches:
    cfg = _config(seq_length, seed, vocab_size, cache, blend=blend, split=split)
    train, valid, _ = mc.BlendedMegatronDatasetBuilder(
        mc.GPTDataset, [train_samples, eval_samples, 0], lambda: True, cfg
    ).build()
    evals = {"valid": valid} if valid is not None else {}
    for name, prefix in eval_sets.items():
        ecfg = _config(seq_length, seed, vocab_size, cache, blend=([prefix], None), split="0,100,0")
        _, ds, _ = mc.BlendedMegatronDatasetBuilder(mc.GPTDataset, [0, eval_samples, 0], lambda: True, ecfg).build()
        evals[name] = ds
    return Batches(train=train, evals=evals)


def causal_mask(seq_length: int) -> torch.Tensor:
    """[1, 1, s, s] bool, True where attention is masked (megatron-core's convention)."""
    return torch.triu(torch.ones(1, 1, seq_length, seq_length, dtype=torch.bool), diagonal=1)


def microbatches(
    dataset: Any, *, start_sample: int, micro_batch_size: int, num_microbatches: int, dp_rank: int, dp_size: int,
) -> Iterator[dict[str, torch.Tensor]]:
    """This DP rank's microbatches of the global batch that begins at `start_sample`."""
    mask = None
    for m in range(num_microbatches):
        first = start_sample + m * micro_batch_size * dp_size + dp_rank * micro_batch_size
        samples = [dataset[(first + i) % len(dataset)] for i in range(micro_batch_size)]
        batch = {k: torch.stack([torch.as_tensor(s[k]) for s in samples]) for k in ("tokens", "labels", "loss_mask", "position_ids")}
        if mask is None:
            mask = causal_mask(batch["tokens"].shape[1])
        batch["attention_mask"] = mask
        yield batch

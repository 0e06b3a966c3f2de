"""Training and evaluation batches from Megatron indexed datasets (.bin/.idx).

megatron-core builds the datasets: GPTDataset per prefix, BlendedDataset for weighted blends,
split by --split into train/valid/test. Named evaluation sets (--eval-data-path en=... ko=...)
are whole datasets of their own. Sample order is a pure function of the iteration: global batch
i holds samples [i*GB, (i+1)*GB), microbatch m of data-parallel rank r the slice
m*mbs*dp + r*mbs. Resuming at a consumed-samples count therefore continues the exact stream.
Each microbatch is collated on the host and moved to the run's device once, here (`to_device`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale.data.index_cache import cache_folders, check_index_cache
from megatron_scale.model.inputs import causal_mask


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
    cache: str | None = None, eval_seed: int | None = None,
) -> Batches:
    """The training blend split by `split` (its order drawn with `seed`) and each named evaluation
    set, whose windows are drawn with `eval_seed` (default `seed`): runs of different seeds that
    share an eval seed score the same windows."""
    if not dist.is_initialized() or dist.get_rank() == 0:  # megatron-core builds on rank 0 first
        for folder in cache_folders([*blend[0], *eval_sets.values()], cache):
            check_index_cache(folder)
    cfg = _config(seq_length, seed, vocab_size, cache, blend=blend, split=split)
    train, valid, _ = mc.BlendedMegatronDatasetBuilder(
        mc.GPTDataset, [train_samples, eval_samples, 0], lambda: True, cfg
    ).build()
    evals = {"valid": valid} if valid is not None else {}
    for name, prefix in eval_sets.items():
        ecfg = _config(seq_length, seed if eval_seed is None else eval_seed, vocab_size, cache,
                       blend=([prefix], None), split="0,100,0")
        _, ds, _ = mc.BlendedMegatronDatasetBuilder(mc.GPTDataset, [0, eval_samples, 0], lambda: True, ecfg).build()
        evals[name] = ds
    return Batches(train=train, evals=evals)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The one place a host batch moves to the run's device: pinned and asynchronous on CUDA."""
    if device.type == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
    return {k: v.to(device) for k, v in batch.items()}


def microbatches(
    dataset: Any, *, start_sample: int, micro_batch_size: int, num_microbatches: int, dp_rank: int, dp_size: int,
    device: torch.device,
) -> Iterator[dict[str, torch.Tensor]]:
    """This DP rank's microbatches of the global batch that begins at `start_sample`, on `device`."""
    mask = None
    for m in range(num_microbatches):
        first = start_sample + m * micro_batch_size * dp_size + dp_rank * micro_batch_size
        samples = [dataset[(first + i) % len(dataset)] for i in range(micro_batch_size)]
        host = {k: torch.stack([torch.as_tensor(s[k]) for s in samples]) for k in ("tokens", "labels", "loss_mask", "position_ids")}
        batch = to_device(host, device)
        if mask is None:
            mask = causal_mask(host["tokens"].shape[1], device)
        batch["attention_mask"] = mask
        yield batch

"""Evaluation windows from a Megatron indexed dataset (.bin/.idx): its sequences concatenated in
order and cut into consecutive windows of seq_length + 1 tokens (inputs and shifted labels),
`samples` of them after the first `skip` (so one held-out set gives disjoint evaluation and
calibration windows). Deterministic, no shuffling, no cache files.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from megatron_scale.data.inspection import open_dataset
from megatron_scale.model.inputs import causal_mask, position_ids


def windows(prefix: str, seq_length: int, samples: int, *, skip: int = 0, flag: str = "--old-data") -> torch.Tensor:
    """[samples, seq_length + 1] token ids: windows skip .. skip + samples - 1; an error naming
    `flag` when the set is too short."""
    ds = open_dataset(prefix)
    width = seq_length + 1
    need = (skip + samples) * width
    parts, have = [], 0
    for i in range(len(ds)):
        if have >= need:
            break
        seq = np.asarray(ds[i], dtype=np.int64)
        parts.append(seq)
        have += len(seq)
    if have < need:
        after = f" after the {skip} skipped windows" if skip else ""
        raise ValueError(f"{flag} {prefix}: {have} tokens, fewer than --samples {samples} x (--seq-length "
                         f"{seq_length} + 1){after}: {need} needed")
    return torch.from_numpy(np.concatenate(parts)[skip * width : need].reshape(samples, width))


def batches(ids: torch.Tensor, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Model batches (tokens, labels, position_ids, causal attention_mask) of `windows`."""
    seq = ids.shape[1] - 1
    mask = causal_mask(seq, ids.device)
    for start in range(0, ids.shape[0], batch_size):
        chunk = ids[start : start + batch_size]
        yield {"tokens": chunk[:, :-1].contiguous(), "labels": chunk[:, 1:].contiguous(),
               "position_ids": position_ids(chunk.shape[0], seq, ids.device),
               "attention_mask": mask}

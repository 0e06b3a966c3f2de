"""A SCALE checkpoint's per-token route records on several named sets, from one forward pass per
window (route_stats/token_records.py and route_stats/mixing.py): both heads' loss and top-1
correctness, every router statistic, the loss and correctness of z_p + alpha (z_a - z_p) at each
alpha of a grid, and the label itself. route_eval/stored.py keeps them in a file; every router
sweep, control and calibration of the checkpoint is then a computation on that file, not a model
pass. Any SCALE checkpoint has both heads, so a SCALE-Preserve checkpoint's records are
SCALE-Route's at that point of training: Route trains bitwise like Preserve
(tests/training/test_train_entry.py).

    sets = {"en": Windows(prefix), "cal/en": Windows(prefix, 16), ...}      # evaluated, held out
    records = collect_sets(load, sets, seq_length=256, samples=16)           # on its own rank(s)
    stored.save(path, records, meta)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from megatron_scale.route_eval.stored import LABELS
from megatron_scale.route_stats.statistics import STATISTICS


@dataclass(frozen=True)
class Windows:
    """Windows `skip` .. `skip` + samples - 1 of the ones training's evaluation draws from a dataset
    prefix (`eval_windows`): skip 0 gives the very windows a run evaluated (--eval-iters x
    --global-batch-size of them), skip = samples as many more, disjoint from those (held out)."""

    prefix: str
    skip: int = 0


def eval_windows(prefix: str, seq_length: int, samples: int, skip: int = 0, seed: int = 1234,
                 vocab_size: int = 1 << 20, flag: str = "--data") -> torch.Tensor:
    """[samples, seq_length + 1] token ids: samples skip .. skip + samples - 1 of the named
    evaluation set as data/batches.py builds it for training (megatron-core's GPTDataset over the
    whole prefix, its window order drawn with the --eval-seed `seed`), so that a checkpoint's
    records score the windows its run evaluated. Within one epoch the order is a permutation of the
    set's windows: two ranges of it never share a window."""
    import numpy as np

    from megatron_scale.data.batches import build_datasets
    from megatron_scale.data.inspection import open_dataset

    need = skip + samples
    indexed = open_dataset(prefix)  # held while its memory-mapped lengths are read
    per_epoch = (int(np.array(indexed.sequence_lengths, dtype=np.int64).sum()) - 1) // seq_length
    del indexed
    if per_epoch < need:
        raise ValueError(f"{flag} {prefix}: {per_epoch} windows of --seq-length {seq_length}, fewer than the "
                         f"{need} asked (windows {skip} .. {need - 1})")
    try:
        ds = build_datasets(blend=([prefix], None), split="100,0,0", eval_sets={"x": prefix}, seq_length=seq_length,
                            seed=seed, eval_seed=seed, vocab_size=vocab_size, train_samples=1, eval_samples=need).evals["x"]
    except Exception as e:  # megatron-core's own errors (a missing file, a set too short)
        raise ValueError(f"{flag} {prefix}: {e}") from e
    rows = []
    for i in range(skip, need):
        item = ds[i]
        rows.append(torch.cat((torch.as_tensor(item["tokens"][:1], dtype=torch.long),
                               torch.as_tensor(item["labels"], dtype=torch.long))))
    return torch.stack(rows)


def _rank(load: str, tp: int, sets: Mapping[str, torch.Tensor], batch_size: int, statistics: Sequence[str],
          alphas: Sequence[float], *, device: torch.device) -> dict[str, dict[str, torch.Tensor]]:
    from megatron_scale.data.windows import batches
    from megatron_scale.evaluation.capture import capturing
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.route_stats.mixing import mixing_records
    from megatron_scale.route_stats.token_records import token_records

    model = load_model(load, Parallel(tp=tp), device).model.eval()
    out: dict[str, dict[str, torch.Tensor]] = {}
    with torch.no_grad(), capturing(model) as layer:
        group = layer.tp_group if layer.tp_size > 1 else None
        for name, ids in sets.items():
            parts: list[dict[str, torch.Tensor]] = []
            for b in batches(ids.to(device), batch_size):
                model(b["tokens"], b["position_ids"], b["attention_mask"])
                z_p, z_a = layer.captured  # [s, b, V/tp]
                layer.captured = None
                labels = b["labels"].t().contiguous()
                rec = {**token_records(z_p, z_a, labels, group, statistics),
                       **mixing_records(z_p, z_a, labels, group, alphas)}
                # [s, b] -> [b, s], row-major over the windows, as route_eval's records are
                parts.append({k: v.t().reshape(-1).cpu() for k, v in rec.items()} | {LABELS: b["labels"].reshape(-1).cpu()})
            out[name] = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    return out


def collect_sets(load: str, sets: Mapping[str, Windows], *, seq_length: int, samples: int, batch_size: int = 2,
                 tp: int = 1, statistics: Sequence[str] = STATISTICS, alphas: Sequence[float] | None = None,
                 seed: int = 1234) -> dict[str, dict[str, torch.Tensor]]:
    """Records of `samples` windows of each named set (training's evaluation windows with
    --eval-seed `seed`), from `load` (any SCALE checkpoint) at TP `tp`."""
    from megatron_scale.launch import on_ranks
    from megatron_scale.route_stats.mixing import ALPHAS

    if not os.path.isdir(load):
        raise ValueError(f"--load: checkpoint directory {load} does not exist")
    ids = {name: eval_windows(w.prefix, seq_length, samples, w.skip, seed, flag=f"--data {name}") for name, w in sets.items()}
    return on_ranks(_rank, tp, 1, load, tp, ids, batch_size, tuple(statistics),
                    tuple(ALPHAS if alphas is None else alphas))[0]

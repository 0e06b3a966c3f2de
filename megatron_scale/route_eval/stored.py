"""A SCALE checkpoint's per-token route records on several named sets, kept in one file, so that
every router sweep, control and calibration of it is a computation on the file, not a model pass.

One forward pass per window gives, per predicted token (route_stats/token_records.py and
route_stats/mixing.py): both heads' loss and top-1 correctness, every router statistic, the loss
and correctness of z_p + alpha (z_a - z_p) at each alpha of a grid, and the label itself (so a
statistic can be pooled per character or word afterwards, route_eval/units.py). Any SCALE
checkpoint has both heads, so a SCALE-Preserve checkpoint's records are SCALE-Route's at that
point of training: Route trains bitwise like Preserve (tests/training/test_train_entry.py).

    sets = {"en": Windows(prefix), "cal/en": Windows(prefix, 0.5), ...}     # two disjoint samples
    records = collect_sets(load, sets, seq_length=256, samples=16)           # on its own rank(s)
    save(path, records, meta);  records, meta = load(path)

The file is safetensors ("<set>/<key>" tensors; the metadata's "meta" is JSON), written atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from megatron_scale.route_stats.statistics import STATISTICS

LABELS = "labels"


@dataclass(frozen=True)
class Windows:
    """`samples` windows of a dataset prefix spread evenly over the whole set (`spread_windows`),
    at `phase` of the spacing: phase 0 and phase 0.5 give two disjoint samples of the same set."""

    prefix: str
    phase: float = 0.0


def spread_windows(prefix: str, seq_length: int, samples: int, phase: float = 0.0, flag: str = "--data") -> torch.Tensor:
    """[samples, seq_length + 1] token ids: the set's documents concatenated in order and cut into
    consecutive windows of seq_length + 1 tokens, of which windows floor((k + phase) M / samples),
    k = 0 .. samples - 1, of the M there are: every part of the set is sampled (a held-out set
    whose documents are whole movies or scenes would otherwise give its first few), and two
    phases give disjoint windows while M >= 2 samples."""
    import numpy as np

    from megatron_scale.data.inspection import open_dataset

    if not 0.0 <= phase < 1.0:
        raise ValueError(f"{flag} {prefix}: phase {phase} must lie in [0, 1)")
    ds = open_dataset(prefix)
    tokens = np.concatenate([np.asarray(ds[i], dtype=np.int64) for i in range(len(ds))]) if len(ds) else np.zeros(0, np.int64)
    width = seq_length + 1
    count = tokens.size // width
    if count < 2 * samples:
        raise ValueError(f"{flag} {prefix}: {tokens.size} tokens make {count} windows of --seq-length {seq_length} + 1, "
                         f"fewer than 2 x --samples {samples} (two disjoint samples)")
    picks = [int((k + phase) * count / samples) for k in range(samples)]
    return torch.from_numpy(tokens[: count * width].reshape(count, width)[picks])


def _rank(load: str, tp: int, sets: Mapping[str, torch.Tensor], batch_size: int, statistics: Sequence[str],
          alphas: Sequence[float], *, device: torch.device) -> dict[str, dict[str, torch.Tensor]]:
    from megatron_scale.route_eval.collect import capturing
    from megatron_scale.route_eval.runner import _model
    from megatron_scale.route_eval.windows import batches
    from megatron_scale.route_stats.mixing import mixing_records
    from megatron_scale.route_stats.token_records import token_records

    model = _model(load, tp, device)
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
                 tp: int = 1, statistics: Sequence[str] = STATISTICS, alphas: Sequence[float] | None = None
                 ) -> dict[str, dict[str, torch.Tensor]]:
    """Records of `samples` windows of each named set, from `load` (any SCALE checkpoint) at TP `tp`."""
    from megatron_scale.convert.launch import on_ranks
    from megatron_scale.route_stats.mixing import ALPHAS

    if not os.path.isdir(load):
        raise ValueError(f"--load: checkpoint directory {load} does not exist")
    ids = {name: spread_windows(w.prefix, seq_length, samples, w.phase, flag=f"--data {name}") for name, w in sets.items()}
    return on_ranks(_rank, tp, 1, load, tp, ids, batch_size, tuple(statistics),
                    tuple(ALPHAS if alphas is None else alphas))[0]


def save(path: str | os.PathLike, records: Mapping[str, Mapping[str, torch.Tensor]], meta: Mapping[str, Any]) -> None:
    """Write the records (bool tensors as uint8) and `meta` to `path`, atomically."""
    from safetensors.torch import save_file

    flat = {f"{name}/{k}": (v.to(torch.uint8) if v.dtype == torch.bool else v).clone()  # no shared storage
            for name, rec in records.items() for k, v in rec.items()}
    bools = sorted(f"{name}/{k}" for name, rec in records.items() for k, v in rec.items() if v.dtype == torch.bool)
    tmp = f"{path}.partial-{os.getpid()}"
    save_file(flat, tmp, metadata={"meta": json.dumps(dict(meta)), "bool": json.dumps(bools)})
    os.replace(tmp, path)


def load(path: str | os.PathLike) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    """(records by set, meta) of a file `save` wrote."""
    from safetensors import safe_open

    if not os.path.isfile(path):
        raise FileNotFoundError(f"route records {path}: no such file")
    records: dict[str, dict[str, torch.Tensor]] = {}
    with safe_open(str(path), framework="pt") as f:
        info = f.metadata() or {}
        bools = set(json.loads(info.get("bool", "[]")))
        for key in f.keys():
            name, sep, k = key.partition("/")
            if name == "cal":  # "cal/<set>/<key>": a calibration set's name has one slash
                inner, _, k = k.partition("/")
                name = f"cal/{inner}"
            t = f.get_tensor(key)
            records.setdefault(name, {})[k] = t.bool() if key in bools else t
    if "meta" not in info:
        raise ValueError(f"route records {path}: not a file route_eval/stored.py wrote (no meta)")
    return records, json.loads(info["meta"])

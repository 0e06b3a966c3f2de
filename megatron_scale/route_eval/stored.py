"""A SCALE checkpoint's per-token route records on several named sets, kept in one file, so that
every router sweep, control and calibration of it is a computation on the file, not a model pass.
evaluation/route_records.py makes them (one forward pass per window); this module only stores and
reads them. Per predicted token: both heads' loss and top-1 correctness, every router statistic,
the loss and correctness of z_p + alpha (z_a - z_p) at each alpha of a grid, and the label itself
(so a statistic can be pooled per character or word afterwards, route_eval/units.py).

    save(path, records, meta);  records, meta = load(path)

The file is safetensors ("<set>/<key>" tensors; the metadata's "meta" is JSON), written atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import torch

LABELS = "labels"


def save(path: str | os.PathLike, records: Mapping[str, Mapping[str, torch.Tensor]], meta: Mapping[str, Any]) -> None:
    """Write the records (bool tensors as uint8) and `meta` to `path`, atomically."""
    from safetensors.torch import save as to_bytes

    from megatron_scale.durable import atomic_write

    flat = {f"{name}/{k}": (v.to(torch.uint8) if v.dtype == torch.bool else v).clone()  # no shared storage
            for name, rec in records.items() for k, v in rec.items()}
    bools = sorted(f"{name}/{k}" for name, rec in records.items() for k, v in rec.items() if v.dtype == torch.bool)
    atomic_write(path, to_bytes(flat, metadata={"meta": json.dumps(dict(meta)), "bool": json.dumps(bools)}))


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

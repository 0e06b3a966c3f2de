"""SCALE model checkpoints in megatron-core's distributed format (dist_checkpointing, torch_dist).

A checkpoint saved at one TP/PP layout loads at another. Beside the tensors it records, in the
checkpoint's common state:
    scale.frozen_digest   digest of the frozen base (model/digest.py), verified at every load
    scale.dims            the SCALE geometry; loading into a model of another geometry stops
                          with a message naming the first differing field
Saving writes into `<dir>.partial` and renames it when every rank has finished, so a crash
mid-save never leaves a directory that looks complete. Checkpoints whose common state is a
pickled common.pt (megatron-core's legacy layout) are refused rather than unpickled.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.model.digest import frozen_base_digest


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used with this model; the message names the directory."""


def _dims_record(model: nn.Module) -> dict[str, Any]:
    rec = dataclasses.asdict(model.scale_dims)  # type: ignore[arg-type]
    return {k: sorted(v) if isinstance(v, frozenset | set) else v for k, v in rec.items()}


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(model: nn.Module, directory: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
    """Save `model` (this rank's shards; every rank calls) to `directory`, which must not exist."""
    target = Path(directory)
    partial = target.with_name(target.name + ".partial")
    if target.exists():
        raise CheckpointError(f"checkpoint directory {target} exists; refusing to overwrite it")
    if _rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    _barrier()
    state = model.sharded_state_dict()  # type: ignore[operator]
    state["scale"] = {"frozen_digest": frozen_base_digest(model), "dims": _dims_record(model)}
    if extra:
        state.update(extra)
    mc.dist_checkpointing.save(
        state, str(partial), sharded_strategy=mc.get_default_save_sharded_strategy("torch_dist")
    )
    _barrier()
    if _rank() == 0:
        partial.rename(target)
    _barrier()
    return target


def read_scale_record(directory: str | os.PathLike) -> dict[str, Any]:
    """The `scale` record of a checkpoint (digest and geometry), without loading tensors."""
    path = Path(directory)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if (path / "common.pt").exists():
        raise CheckpointError(f"{path}: legacy checkpoint with a pickled common.pt; refusing to unpickle it")
    common = mc.dist_checkpointing.load_common_state_dict(str(path))
    if "scale" not in common:
        raise CheckpointError(f"{path} is not a SCALE checkpoint (no 'scale' record)")
    return common["scale"]


def load_checkpoint(model: nn.Module, directory: str | os.PathLike) -> dict[str, Any]:
    """Load `directory` into `model` at the model's own layout and verify the frozen base.

    Returns the checkpoint's `scale` record."""
    record = read_scale_record(directory)
    mine = _dims_record(model)
    for field, value in mine.items():
        if record["dims"].get(field) != value:
            raise CheckpointError(
                f"{directory}: SCALE geometry differs at '{field}': checkpoint "
                f"{record['dims'].get(field)!r}, model {value!r}"
            )
    state = mc.dist_checkpointing.load(model.sharded_state_dict(), str(directory))  # type: ignore[operator]
    state.pop("scale", None)
    model.load_state_dict(state, strict=True)
    digest = frozen_base_digest(model)
    if digest != record["frozen_digest"]:
        raise CheckpointError(
            f"{directory}: the frozen base does not match its recorded digest "
            f"({digest[:16]}... != {record['frozen_digest'][:16]}...); the base tensors changed"
        )
    return record

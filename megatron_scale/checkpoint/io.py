"""SCALE model checkpoints in megatron-core's distributed format (dist_checkpointing, torch_dist).

A checkpoint saved at one TP/PP layout loads at another. Beside the tensors it records, in the
checkpoint's common state (records.py reads and names them):
    scale.frozen_digest   digest of the frozen tensors (digest.py), verified at every load
    scale.dims            the SCALE geometry (None for a plain GPT model); loading into a model
                          of another geometry stops with a message naming the first differing field.
                          It also records the router's default (router_tau, router_statistic,
                          router_direction, router_unit), which is not geometry: a model with other
                          router settings loads it (checkpoints written before router_statistic,
                          router_direction or router_unit existed lack them: cosine, above, token)
    scale.lora            LoRA rank and alpha (absent without adapters); loading stops when they,
                          or the presence of adapters, differ from the model's
What a checkpoint records of the model's method (`scale.dims`, `scale.lora`) is what the method
says it records (`method.record()`, megatron_scale/methods/): save_checkpoint and load_checkpoint
take the method the model was built for, and a load compares its record with the checkpoint's.
The model's sharded state dict is built once per save and once per load; the digest is taken
from it.
Training adds its own sharded entries (optimizer, RNG, iteration) through `extra`, a function of
the model's sharded state dict, since the optimizer's entries are built from it.
Saving writes into `<dir>.partial` and renames it when every rank has finished, so a crash
mid-save never leaves a directory that looks complete. Checkpoints whose common state is a
pickled common.pt (megatron-core's legacy layout) are refused rather than unpickled.
A training run keeps its checkpoints as `<save>/iter_NNNNNNN/` and names the newest in
`<save>/latest_checkpointed_iteration.txt` (Megatron-LM's marker); `latest_iteration_dir` reads it.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale import hooks
from megatron_scale.scale_config import ROUTER_SETTINGS
from megatron_scale.checkpoint.digest import frozen_base_digest
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords, RecordedMethod, read_records, scale_record
from megatron_scale.model.weights.state import tree_map

__all__ = [
    "CheckpointError", "check_lora_record", "check_method_record", "iteration_dir", "latest_iteration_dir",
    "load_checkpoint", "read_scale_record", "save_checkpoint",
]

Extra = Callable[[dict], dict] | None
MARKER = "latest_checkpointed_iteration.txt"


def iteration_dir(save: str | os.PathLike, iteration: int) -> Path:
    return Path(save) / f"iter_{iteration:07d}"


def latest_iteration_dir(root: str | os.PathLike) -> Path | None:
    """The checkpoint the marker under `root` names, or None when `root` holds no run."""
    marker = Path(root) / MARKER
    if not marker.exists():
        return None
    text = marker.read_text().strip()
    if not text.isdigit():
        raise ValueError(f"--load {root}: {MARKER} holds {text!r}, not an iteration number")
    path = iteration_dir(root, int(text))
    if not path.is_dir():
        raise ValueError(f"--load {root}: {MARKER} names iteration {text} but {path} is missing")
    return path


def _first_difference(
    mine: dict[str, Any], theirs: dict[str, Any], skip: tuple[str, ...] = ()
) -> tuple[str, Any, Any] | None:
    """(field, checkpoint's value, model's value) at the first field of `mine` that differs."""
    for field, value in mine.items():
        if field not in skip and theirs.get(field) != value:
            return field, theirs.get(field), value
    return None


def _check_lora(mine: dict[str, Any] | None, theirs: dict[str, Any] | None, directory: str | os.PathLike) -> None:
    """The method's LoRA record `mine` against the checkpoint's."""
    if (mine is None) != (theirs is None):
        kind = {True: "no LoRA adapters", False: "LoRA adapters"}
        raise CheckpointError(f"{directory} holds {kind[theirs is None]} but the model has {kind[mine is None]}")
    differ = _first_difference(mine or {}, theirs or {})
    if differ is not None:
        field, was, value = differ
        raise CheckpointError(
            f"{directory}: LoRA settings differ at '{field}': checkpoint {was!r}, model {value!r} (--lora-{field})"
        )


def _check_dims(mine: dict[str, Any] | None, theirs: Any, directory: str | os.PathLike) -> None:
    """The method's geometry record `mine` against the checkpoint's ScaleDims `theirs`."""
    if (mine is None) != (theirs is None):
        kind = {True: "a plain GPT model", False: "a SCALE model"}
        raise CheckpointError(f"{directory} holds {kind[theirs is None]} but the model is {kind[mine is None]}")
    if mine is None:
        return
    # the router's settings are recorded as the checkpoint's default, not geometry
    differ = _first_difference(mine, theirs.to_record(), skip=ROUTER_SETTINGS)
    if differ is not None:
        field, was, value = differ
        raise CheckpointError(f"{directory}: SCALE geometry differs at '{field}': checkpoint {was!r}, model {value!r}")


def check_method_record(method: RecordedMethod, records: CheckpointRecords, directory: str | os.PathLike) -> None:
    """Refuse a checkpoint whose record is not `method`'s: another kind of model (plain GPT, SCALE,
    LoRA adapters or none), another SCALE geometry (the router's settings aside), another LoRA
    rank or alpha. The message names the directory and the first field that differs."""
    mine = dict(method.record())
    _check_dims(mine.pop("dims"), records.dims, directory)
    _check_lora(mine.pop("lora", None), records.lora, directory)
    theirs = records.scale or {}
    for key, value in mine.items():  # a method's own entries
        if theirs.get(key) != value:
            raise CheckpointError(f"{directory}: scale.{key} is {theirs.get(key)!r} but the model's method "
                                  f"({getattr(method, 'name', type(method).__name__)}) records {value!r}")


def check_lora_record(method: RecordedMethod, directory: str | os.PathLike,
                      records: CheckpointRecords | None = None) -> None:
    """Refuse a megatron-scale checkpoint whose LoRA rank/alpha (or their absence) differ from
    what `method` records. Checkpoints without a megatron-scale record are not checked.
    `records`: the directory's, where the caller has read them already."""
    if records is None:
        records = read_records(directory, required=False)
    if records is not None and records.scale is not None:
        _check_lora(method.record().get("lora"), records.lora, directory)


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(model: nn.Module, directory: str | os.PathLike, extra: Extra = None, *,
                    method: RecordedMethod) -> Path:
    """Save `model` (this rank's shards; every rank calls), built for `method`, to `directory`,
    which must not exist. `extra(model_sharded_state_dict)` returns further entries to save beside
    the model's; `method.record()` is what the checkpoint records of the method."""
    target = Path(directory)
    partial = target.with_name(target.name + ".partial")
    if target.exists():
        raise CheckpointError(f"checkpoint directory {target} exists; refusing to overwrite it")
    if _rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    _barrier()
    state = model.sharded_state_dict()  # type: ignore[operator]
    more = extra(state) if extra else {}
    state["scale"] = scale_record(method, frozen_base_digest(model, sharded=state))
    state.update(more)
    with hooks.checkpoint_writes(str(partial)):
        mc.dist_checkpointing.save(
            state, str(partial), sharded_strategy=mc.get_default_save_sharded_strategy("torch_dist")
        )
    _barrier()
    if _rank() == 0:
        hooks.point("save-before-rename", checkpoint=target.name)
        partial.rename(target)
    _barrier()
    return target


def read_scale_record(directory: str | os.PathLike) -> dict[str, Any]:
    """The `scale` record of a checkpoint (digest and geometry) as saved, without loading tensors
    (records.read_records gives it typed)."""
    scale = read_records(directory).scale
    if scale is None:
        raise CheckpointError(f"{directory} is not a megatron-scale checkpoint (no 'scale' record)")
    return scale


def load_checkpoint(
    model: nn.Module, directory: str | os.PathLike, extra: Extra = None, records: CheckpointRecords | None = None,
    *, method: RecordedMethod,
) -> dict[str, Any]:
    """Load `directory` into `model`, built for `method`, at the model's own layout and verify the
    frozen base; a checkpoint that records another method is refused (check_method_record).
    `records`: the directory's, where the caller has read them already.

    Returns the loaded `extra` entries (see save_checkpoint) and the `scale` record."""
    if records is None:
        records = read_records(directory)
    if records.scale is None:
        raise CheckpointError(f"{directory} is not a megatron-scale checkpoint (no 'scale' record)")
    check_method_record(method, records, directory)
    sharded = model.sharded_state_dict()  # type: ignore[operator]
    model_keys = set(sharded)
    # dist_checkpointing.load rewrites the ShardedTensors it is given (their data gains the stacked
    # axes), so the digest keeps shallow copies; their data are still the parameters themselves.
    model_sharded = {k: tree_map(copy.copy, v) for k, v in sharded.items()}
    sharded.update(extra(sharded) if extra else {})
    state = mc.dist_checkpointing.load(sharded, str(directory))
    # The result also carries the checkpoint's common (non-sharded) entries: hand back all but
    # the model's own.
    loaded = {k: v for k, v in state.items() if k not in model_keys and k != "scale"}
    model.load_state_dict({k: state[k] for k in model_keys}, strict=True)
    digest = frozen_base_digest(model, sharded=model_sharded)
    if digest != records.digest:
        raise CheckpointError(
            f"{directory}: the frozen base does not match its recorded digest "
            f"({digest[:16]}... != {str(records.digest)[:16]}...); the base tensors changed"
        )
    return {**loaded, "scale": records.scale}

"""SCALE model checkpoints in megatron-core's distributed format (dist_checkpointing, torch_dist).

A checkpoint saved at one TP/PP layout loads at another. Beside the tensors it records, in the
checkpoint's common state:
    scale.frozen_digest   digest of the frozen tensors (model/digest.py), verified at every load
    scale.dims            the SCALE geometry (None for a plain GPT model); loading into a model
                          of another geometry stops with a message naming the first differing field.
                          It also records the router's default (router_tau, router_statistic), which
                          is not geometry: a model with other router settings loads it (checkpoints
                          written before router_statistic existed lack it: cosine)
    scale.lora            LoRA rank and alpha (absent without adapters); loading stops when they,
                          or the presence of adapters, differ from the model's
Training adds its own sharded entries (optimizer, RNG, iteration) through `extra`, a function of
the model's sharded state dict, since the optimizer's entries are built from it.
Saving writes into `<dir>.partial` and renames it when every rank has finished, so a crash
mid-save never leaves a directory that looks complete. Checkpoints whose common state is a
pickled common.pt (megatron-core's legacy layout) are refused rather than unpickled.
A training run keeps its checkpoints as `<save>/iter_NNNNNNN/` and names the newest in
`<save>/latest_checkpointed_iteration.txt` (Megatron-LM's marker); `latest_iteration_dir` reads it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.config import ROUTER_SETTINGS
from megatron_scale.model.digest import frozen_base_digest


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used with this model; the message names the directory."""


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


def _dims_record(model: nn.Module) -> dict[str, Any] | None:
    dims = getattr(model, "scale_dims", None)
    return None if dims is None else dims.to_record()


def _lora_record(model: nn.Module) -> dict[str, Any] | None:
    settings = getattr(model, "lora_settings", None)
    return None if settings is None else settings.record()


def _check_lora(model: nn.Module, record: dict[str, Any], directory: str | os.PathLike) -> None:
    mine, theirs = _lora_record(model), record.get("lora")
    if (mine is None) != (theirs is None):
        kind = {True: "no LoRA adapters", False: "LoRA adapters"}
        raise CheckpointError(f"{directory} holds {kind[theirs is None]} but the model has {kind[mine is None]}")
    for field, value in (mine or {}).items():
        if theirs.get(field) != value:  # type: ignore[union-attr]
            raise CheckpointError(
                f"{directory}: LoRA settings differ at '{field}': checkpoint {theirs.get(field)!r}, "  # type: ignore[union-attr]
                f"model {value!r} (--lora-{field})"
            )


def check_lora_record(model: nn.Module, directory: str | os.PathLike) -> None:
    """Refuse a megatron-scale checkpoint whose LoRA rank/alpha (or their absence) differ from
    `model`'s. Checkpoints without a megatron-scale record are not checked."""
    try:
        record = read_scale_record(directory)
    except CheckpointError:
        return
    _check_lora(model, record, directory)


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(model: nn.Module, directory: str | os.PathLike, extra: Extra = None) -> Path:
    """Save `model` (this rank's shards; every rank calls) to `directory`, which must not exist.
    `extra(model_sharded_state_dict)` returns further entries to save beside the model's."""
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
    state["scale"] = {"frozen_digest": frozen_base_digest(model), "dims": _dims_record(model)}
    if _lora_record(model) is not None:
        state["scale"]["lora"] = _lora_record(model)
    state.update(more)
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
        raise CheckpointError(f"{path} is not a megatron-scale checkpoint (no 'scale' record)")
    return common["scale"]


def is_scale_checkpoint(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a SCALE model (a megatron-scale checkpoint with a geometry)."""
    try:
        return read_scale_record(directory).get("dims") is not None
    except CheckpointError:
        return False


def load_checkpoint(model: nn.Module, directory: str | os.PathLike, extra: Extra = None) -> dict[str, Any]:
    """Load `directory` into `model` at the model's own layout and verify the frozen base.

    Returns the loaded `extra` entries (see save_checkpoint) and the `scale` record."""
    record = read_scale_record(directory)
    mine, theirs = _dims_record(model), record.get("dims")
    if (mine is None) != (theirs is None):
        kind = {True: "a plain GPT model", False: "a SCALE model"}
        raise CheckpointError(f"{directory} holds {kind[theirs is None]} but the model is {kind[mine is None]}")
    for field, value in (mine or {}).items():
        if field in ROUTER_SETTINGS:  # recorded as the checkpoint's default, not geometry
            continue
        if theirs.get(field) != value:  # type: ignore[union-attr]
            raise CheckpointError(
                f"{directory}: SCALE geometry differs at '{field}': checkpoint "
                f"{theirs.get(field)!r}, model {value!r}"  # type: ignore[union-attr]
            )
    _check_lora(model, record, directory)
    sharded = model.sharded_state_dict()  # type: ignore[operator]
    model_keys = set(sharded)
    sharded.update(extra(sharded) if extra else {})
    state = mc.dist_checkpointing.load(sharded, str(directory))
    # The result also carries the checkpoint's common (non-sharded) entries: hand back all but
    # the model's own.
    loaded = {k: v for k, v in state.items() if k not in model_keys and k != "scale"}
    model.load_state_dict({k: state[k] for k in model_keys}, strict=True)
    digest = frozen_base_digest(model)
    if digest != record["frozen_digest"]:
        raise CheckpointError(
            f"{directory}: the frozen base does not match its recorded digest "
            f"({digest[:16]}... != {record['frozen_digest'][:16]}...); the base tensors changed"
        )
    return {**loaded, "scale": record}

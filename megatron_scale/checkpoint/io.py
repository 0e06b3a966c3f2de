"""Model checkpoints in megatron-core's distributed format (dist_checkpointing, torch_dist): a SCALE
model, a plain GPT model or one with LoRA adapters.

A checkpoint saved at one TP/PP layout loads at another. Beside the tensors it records, in the
checkpoint's common state (records.py reads and names them), the `scale` record:
    frozen_digest   digest of the frozen tensors (digest.py), verified at every load
    mcore_version   the megatron-core that wrote it (a newer one's checkpoint is refused)
    and the entries of the model's method (what `method.record()` says, megatron_scale/methods/:
    the SCALE geometry, LoRA's rank and alpha). save_checkpoint and load_checkpoint take the
    method the model was built for, and a load asks it to check the checkpoint's record
    (`method.check_record`): each method checks its own entries, naming the first that differs.
The model's sharded state dict is built once per save and once per load; the digest is taken
from it.
Training adds its own sharded entries (optimizer, RNG, iteration) through `extra`, a function of
the model's sharded state dict, since the optimizer's entries are built from it.
Saving writes into `<dir>.partial` and renames it when every rank has finished and fsynced its
files (durable.durable_replace), so neither a kill nor a crash of the machine mid-save leaves a
directory that looks complete. Checkpoints whose common state is a
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
from megatron_scale.durable import disk_full, durable_replace, fsync_tree, os_error
from megatron_scale.checkpoint.digest import frozen_base_digest
from megatron_scale.checkpoint.layout import SavedLayout
from megatron_scale.checkpoint.records import (
    COMMON_ENTRIES, LAYOUT, MODEL_ARGS, SCALE, TRAIN_STATE, CheckpointError, CheckpointRecords, RecordedMethod,
    read_records, scale_record,
)
from megatron_scale.distributed import collective_device
from megatron_scale.model.weights.state import tree_map

__all__ = ["CheckpointError", "iteration_dir", "latest_iteration_dir", "load_checkpoint", "save_checkpoint"]

Extra = Callable[[dict], dict] | None
MARKER = "latest_checkpointed_iteration.txt"


def iteration_dir(save: str | os.PathLike[str], iteration: int) -> Path:
    return Path(save) / f"iter_{iteration:07d}"


def latest_iteration_dir(root: str | os.PathLike[str]) -> Path | None:
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


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _why(e: BaseException, partial: Path) -> str:
    """The OS error under a failed save (torch's CheckpointException holds each rank's), in one
    line: a full disk as durable.disk_full names it, else the first OSError with an errno."""
    why = disk_full(e, partial) or os_error(e)
    if why is not None:
        return why
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _digest(model: nn.Module, sharded: dict) -> str:
    """The frozen base's digest, its sums all-reduced on the device the default group serves."""
    return frozen_base_digest(model, sharded=sharded, device=collective_device() if dist.is_initialized() else None)


def save_checkpoint(model: mc.MegatronModule, directory: str | os.PathLike[str], extra: Extra = None, *,
                    method: RecordedMethod, model_args: dict[str, Any] | None = None,
                    layout: SavedLayout | None = None, train_state: dict[str, Any] | None = None) -> Path:
    """Save `model` (this rank's shards; every rank calls), built for `method`, to `directory`,
    which must not exist. `method.record()` is what the checkpoint records of the method; the
    common state also records `model_args` (LlamaArgs.to_json()), and for a training run its
    `layout` and `train_state` (records.py reads them back). `extra(model_sharded_state_dict)`
    returns further sharded entries to save beside the model's (a training run's optimizer and
    RNG state); the common state's entries are not among them."""
    target = Path(directory)
    partial = target.with_name(target.name + ".partial")
    if target.exists():
        raise CheckpointError(f"checkpoint directory {target} exists; refusing to overwrite it")
    if _rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    _barrier()
    state = model.sharded_state_dict()
    more = extra(state) if extra else {}
    named = sorted(set(more) & set(COMMON_ENTRIES))
    if named:
        raise ValueError(f"save_checkpoint: extra entries {named} are the common state's; pass them by name")
    state[SCALE] = scale_record(method, _digest(model, state))
    if model_args is not None:
        state[MODEL_ARGS] = model_args
    if layout is not None:
        state[LAYOUT] = layout.to_record()
    state.update(more)
    if train_state is not None:
        state[TRAIN_STATE] = train_state
    try:
        with hooks.checkpoint_writes(str(partial)):
            mc.dist_checkpointing.save(
                state, str(partial), sharded_strategy=mc.get_default_save_sharded_strategy("torch_dist")
            )
        # durable before the rename: each rank fsyncs the shard files it wrote (on a shared file
        # system another node's writes are that node's to flush), rank 0 the rest and the folders
        mine = f"__{_rank()}_"
        fsync_tree(partial, lambda name: name.startswith(mine))
    except BaseException as e:  # a full disk, a quota, an I/O error: every rank sees the save fail
        if isinstance(e, KeyboardInterrupt | SystemExit | GeneratorExit):  # (torch's CheckpointException
            raise                                                         # is a BaseException too)
        why = _why(e, partial)
        if _rank() == 0:
            shutil.rmtree(partial, ignore_errors=True)
        raise CheckpointError(f"saving {target} failed: {why}; {partial} removed, nothing renamed (the "
                              "previous checkpoint and the marker are as they were)") from e
    _barrier()
    if _rank() == 0:
        fsync_tree(partial, lambda name: not (name.startswith("__") and name.endswith(".distcp")))
        hooks.point("save-before-rename", checkpoint=target.name)
        durable_replace(partial, target, synced=True)
    _barrier()
    return target


def load_checkpoint(
    model: mc.MegatronModule, directory: str | os.PathLike[str], extra: Extra = None, records: CheckpointRecords | None = None,
    *, method: RecordedMethod,
) -> dict[str, Any]:
    """Load `directory` into `model`, built for `method`, at the model's own layout and verify the
    frozen base; a checkpoint that records another method is refused (method.check_record).
    `records`: the directory's, where the caller has read them already.

    Returns the loaded `extra` entries (see save_checkpoint) and the `scale` record (the other
    common entries are `records`')."""
    if records is None:
        records = read_records(directory)
    if records.scale is None:
        raise CheckpointError(f"{directory} is not a megatron-scale checkpoint (no 'scale' record)")
    method.check_record(records, directory)
    sharded = model.sharded_state_dict()
    model_keys = set(sharded)
    # dist_checkpointing.load rewrites the ShardedTensors it is given (their data gains the stacked
    # axes), so the digest keeps shallow copies; their data are still the parameters themselves.
    model_sharded = {k: tree_map(copy.copy, v) for k, v in sharded.items()}
    sharded.update(extra(sharded) if extra else {})
    state = mc.dist_checkpointing.load(sharded, str(directory))
    # The result also carries the checkpoint's common (non-sharded) entries: hand back all but
    # the model's own.
    loaded = {k: v for k, v in state.items() if k not in model_keys and k not in COMMON_ENTRIES}
    model.load_state_dict({k: state[k] for k in model_keys}, strict=True)
    digest = _digest(model, model_sharded)
    if digest != records.digest:
        raise CheckpointError(
            f"{directory}: the frozen base does not match its recorded digest "
            f"({digest[:16]}... != {str(records.digest)[:16]}...); the base tensors changed"
        )
    return {**loaded, SCALE: records.scale}

"""The records a checkpoint keeps beside its tensors, read (and named) in this one module.

megatron-core's torch_dist format has a common (non-sharded) state; megatron-scale keeps there
    model_args            the architecture (LlamaArgs.to_json: Megatron-LM's flag names), written by
                          conversion, upscaling and training runs
    scale                 the frozen base's digest (`frozen_digest`: digest.py, verified at every
                          load), the megatron-core that wrote it (`mcore_version`), and the entries
                          the model's training method records (methods/: the SCALE geometry
                          `dims`, None for a plain GPT model; LoRA's rank and alpha `lora`; each
                          method parses and checks its own)
    train_state           iteration, consumed samples, LR scheduler, Adam step (training runs)
    layout                the TP / PP / DP a training run saved at, whether its optimizer was
                          distributed and the format of its optimizer state (layout.py `SavedLayout`)

`read_records(directory)` gives them typed (the method's entries as saved), without loading a
tensor. One policy for what cannot
be read: a missing directory and a legacy checkpoint whose common state is a pickled common.pt
(never unpickled) are a CheckpointError naming the directory; so is a directory that is no
torch_dist checkpoint (no .metadata), unless the caller passes `required=False` and gets None.
A torch_dist checkpoint that megatron-scale did not write has no `scale` record (`scale` None).
A training checkpoint written before `layout` existed gets one read off its tensor index
(.metadata): TP and PP from the RNG entry's (PP, TP) grid, the optimizer state's format from its
keys (`recorded` False; DP unknown).

`check_checkpoint_files(directory)` (run by read_records, so by training's plan for --load, by
conversion's MegatronReader and by every load) refuses, naming the file, before a tensor is read:
    - a checkpoint from a newer megatron-core: metadata.json's torch_dist format version above the
      one megatron-core MCORE_VERSION writes, or (megatron-scale's own checkpoints) the recorded
      `scale.mcore_version` newer than MCORE_VERSION;
    - a missing or short shard: every `__*_*.distcp` file .metadata lists must be there and hold
      the bytes .metadata places in it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, overload

from packaging.version import InvalidVersion, Version

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint.layout import SavedLayout, indexed_layout

MODEL_ARGS = "model_args"
SCALE = "scale"
TRAIN_STATE = "train_state"
LAYOUT = "layout"
COMMON_ENTRIES = (MODEL_ARGS, SCALE, TRAIN_STATE, LAYOUT)
"""The common state's entries: save_checkpoint writes them from its arguments, read_records reads them."""
WRITER_ENTRIES = ("frozen_digest", "mcore_version")
"""The `scale` record's entries that the writer keeps (scale_record), beside the method's own."""

# metadata.json's format: what megatron-core MCORE_VERSION writes (CheckpointingConfig; torch_dist v1)
FORMAT_FILE = "metadata.json"
SHARDED_BACKEND, SHARDED_BACKEND_VERSION = "torch_dist", 1


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used with this model; the message names the directory."""


def _check_format(path: Path) -> None:
    """metadata.json names a torch_dist format this megatron-core reads (absent: not checked,
    .metadata is what marks a torch_dist checkpoint here)."""
    config = path / FORMAT_FILE
    if not config.is_file():
        return
    try:
        fmt = json.loads(config.read_text())
        backend, version = fmt["sharded_backend"], int(fmt.get("sharded_backend_version", 1))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{config}: not megatron-core's checkpoint format record ({e})") from e
    if backend != SHARDED_BACKEND:
        raise CheckpointError(f"{config}: sharded_backend {backend!r}; megatron-scale reads {SHARDED_BACKEND} only")
    if version > SHARDED_BACKEND_VERSION:
        raise CheckpointError(
            f"{config}: {backend} format version {version}, written by a newer megatron-core; megatron-core "
            f"{mc.MCORE_VERSION} (the one installed) reads version {SHARDED_BACKEND_VERSION}")


def _check_shards(path: Path) -> Any:
    """Every shard file .metadata lists is there with the bytes it places in it. Returns the index."""
    import torch.distributed.checkpoint as dcp

    try:
        index = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as e:  # noqa: BLE001 (a damaged pickle raises anything)
        raise CheckpointError(f"{path / '.metadata'}: cannot be read ({type(e).__name__}: {e})") from e
    storage = index.storage_data
    needed: dict[str, int] = {}
    for info in storage.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        shard = path / name
        if not shard.is_file():
            raise CheckpointError(f"{shard}: shard file missing ({len(needed)} listed in {path / '.metadata'}); "
                                  "the checkpoint is incomplete")
        if shard.stat().st_size < size:
            raise CheckpointError(f"{shard}: shard file truncated ({shard.stat().st_size} bytes, .metadata places "
                                  f"{size}); the checkpoint is incomplete")
    return index


def _check_writer(path: Path, scale: dict[str, Any] | None) -> None:
    """The megatron-core that wrote a megatron-scale checkpoint is not newer than this one."""
    written = (scale or {}).get("mcore_version")
    if written is None:
        return
    try:
        newer = Version(str(written)) > Version(mc.MCORE_VERSION)
    except InvalidVersion:
        newer = True
    if newer:
        raise CheckpointError(f"{path}: written with megatron-core {written} (scale.mcore_version), newer than the "
                              f"installed {mc.MCORE_VERSION}; read it with megatron-core {written}")


def check_checkpoint_files(directory: str | os.PathLike[str]) -> Any:
    """Refuse, naming the file, a torch_dist checkpoint from a newer megatron-core's format or with
    a shard file missing or short (see the module docstring). Reads no tensor; returns the
    checkpoint's index (torch.distributed.checkpoint Metadata)."""
    path = Path(directory)
    _check_format(path)
    return _check_shards(path)


@dataclass(frozen=True)
class CheckpointRecords:
    """What a checkpoint records about its model and run (None: not recorded)."""

    directory: Path
    model_args: dict[str, Any] | None
    """LlamaArgs.to_json() (LlamaArgs.from_json reads it back)."""
    train_state: dict[str, Any] | None
    """A training run's state (training/checkpointing.py)."""
    layout: SavedLayout | None
    """The layout a training run saved at (None: no training checkpoint)."""
    digest: str | None
    """The frozen base's digest; None where megatron-scale did not write the checkpoint."""
    scale: dict[str, Any] | None
    """The `scale` record as saved: the writer's entries and the method's, as plain values (None
    where megatron-scale did not write the checkpoint). Each method reads its own entries
    (methods/: `from_record`)."""


@overload
def read_records(directory: str | os.PathLike[str], *, required: Literal[True] = ...) -> CheckpointRecords: ...
@overload
def read_records(directory: str | os.PathLike[str], *, required: bool) -> CheckpointRecords | None: ...
def read_records(directory: str | os.PathLike[str], *, required: bool = True) -> CheckpointRecords | None:
    """The records of the checkpoint in `directory` (see the module docstring for the policy;
    `required=False`: None for a directory that is no torch_dist checkpoint)."""
    path = Path(directory)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if (path / "common.pt").exists():
        raise CheckpointError(f"{path}: legacy checkpoint with a pickled common.pt; refusing to unpickle it")
    if not (path / ".metadata").is_file():
        if not required:
            return None
        raise CheckpointError(f"{path}: not a megatron-core torch_dist checkpoint (no .metadata)")
    index = check_checkpoint_files(path)
    common = mc.dist_checkpointing.load_common_state_dict(str(path))
    scale = common.get(SCALE)
    _check_writer(path, scale)
    train_state = common.get(TRAIN_STATE)
    layout: SavedLayout | None
    try:
        if LAYOUT in common:
            layout = SavedLayout.from_record(common[LAYOUT], where=f"{path}: {LAYOUT}")
        else:
            layout = None if train_state is None else indexed_layout(index, where=str(path / ".metadata"))
    except ValueError as e:
        raise CheckpointError(str(e)) from e
    return CheckpointRecords(
        directory=path, model_args=common.get(MODEL_ARGS), train_state=train_state, layout=layout,
        digest=(scale or {}).get("frozen_digest"), scale=scale,
    )


class RecordedMethod(Protocol):
    """What a checkpoint records of the training method its model was built for (each class in
    megatron_scale/methods/ says it: methods/base.py TrainingMethod.record)."""

    def record(self) -> dict[str, Any]:
        """Its entries in the `scale` record (the first: the model's geometry)."""
        ...

    def check_record(self, records: CheckpointRecords, where: str | os.PathLike[str]) -> None:
        """Refuse (CheckpointError, naming `where` and the entry) a checkpoint whose record is
        not this method's."""
        ...


def scale_record(method: RecordedMethod, digest: str) -> dict[str, Any]:
    """The `scale` record a checkpoint of a model built for `method` keeps (its frozen base's
    digest given). Its keys, in this order, as checkpoints have always had them: frozen_digest,
    the method's first entry (the geometry), mcore_version, then the method's other entries."""
    entries = list(method.record().items())
    return {"frozen_digest": digest, **dict(entries[:1]), "mcore_version": mc.MCORE_VERSION, **dict(entries[1:])}

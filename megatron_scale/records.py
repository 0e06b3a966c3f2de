"""The records a checkpoint keeps beside its tensors, read (and named) in this one module.

megatron-core's torch_dist format has a common (non-sharded) state; megatron-scale keeps there
    model_args            the architecture (LlamaArgs.to_json: Megatron-LM's flag names), written by
                          conversion, upscaling and training runs
    scale.frozen_digest   digest of the frozen tensors (model/digest.py), verified at every load
    scale.dims            the SCALE geometry, ScaleDims.to_record() (None for a plain GPT model)
    scale.lora            LoRA rank and alpha (absent without adapters)
    train_state           iteration, consumed samples, LR scheduler, Adam step (training runs)

`read_records(directory)` gives them typed, without loading a tensor. One policy for what cannot
be read: a missing directory and a legacy checkpoint whose common state is a pickled common.pt
(never unpickled) are a CheckpointError naming the directory; so is a directory that is no
torch_dist checkpoint (no .metadata), unless the caller passes `required=False` and gets None.
A torch_dist checkpoint that megatron-scale did not write has no `scale` record (`scale` None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleConfigError, ScaleDims

MODEL_ARGS = "model_args"
SCALE = "scale"
TRAIN_STATE = "train_state"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used with this model; the message names the directory."""


@dataclass(frozen=True)
class CheckpointRecords:
    """What a checkpoint records about its model and run (None: not recorded)."""

    directory: Path
    model_args: dict[str, Any] | None
    """LlamaArgs.to_json() (LlamaArgs.from_json reads it back)."""
    dims: ScaleDims | None
    """The SCALE geometry; None for a plain GPT model (or no megatron-scale checkpoint)."""
    lora: dict[str, Any] | None
    """LoRA rank and alpha of a `--method lora` checkpoint."""
    train_state: dict[str, Any] | None
    """A training run's state (training/checkpointing.py)."""
    digest: str | None
    """The frozen base's digest; None where megatron-scale did not write the checkpoint."""
    scale: dict[str, Any] | None
    """The `scale` record as saved (digest, dims and lora as plain values)."""

    @property
    def is_scale(self) -> bool:
        """Whether the checkpoint holds a SCALE model."""
        return self.dims is not None


@overload
def read_records(directory: str | os.PathLike, *, required: Literal[True] = ...) -> CheckpointRecords: ...
@overload
def read_records(directory: str | os.PathLike, *, required: bool) -> CheckpointRecords | None: ...
def read_records(directory: str | os.PathLike, *, required: bool = True) -> CheckpointRecords | None:
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
    common = mc.dist_checkpointing.load_common_state_dict(str(path))
    scale = common.get(SCALE)
    recorded = (scale or {}).get("dims")
    try:
        dims = None if recorded is None else ScaleDims.from_record(recorded, where=f"{path}: scale.dims")
    except ScaleConfigError as e:
        raise CheckpointError(str(e)) from e
    return CheckpointRecords(
        directory=path, model_args=common.get(MODEL_ARGS), dims=dims, lora=(scale or {}).get("lora"),
        train_state=common.get(TRAIN_STATE), digest=(scale or {}).get("frozen_digest"), scale=scale,
    )


def model_records(model: nn.Module) -> tuple[ScaleDims | None, dict[str, Any] | None]:
    """(geometry, LoRA record) of a built model: what its checkpoints record."""
    settings = getattr(model, "lora_settings", None)
    return getattr(model, "scale_dims", None), None if settings is None else settings.record()


def scale_record(model: nn.Module, digest: str) -> dict[str, Any]:
    """The `scale` record a checkpoint of `model` keeps (its frozen base's digest given)."""
    dims, lora = model_records(model)
    record: dict[str, Any] = {"frozen_digest": digest, "dims": None if dims is None else dims.to_record()}
    if lora is not None:
        record["lora"] = lora
    return record

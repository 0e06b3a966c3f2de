"""Reading a megatron-core dist checkpoint (torch_dist) tensor by tensor, without ranks.

The directory may be a checkpoint or a training run's --save directory (its newest checkpoint,
as latest_checkpointed_iteration.txt names it).

Each tensor is read as its global (layout-independent) value through torch.distributed.checkpoint
with no process group: a checkpoint saved at any TP/PP reads the same, and only one tensor (all
layers of one key) is in memory at a time. The checkpoint's records (records.py: the model
arguments, the method's entries) are `records`. Whatever cannot be read is one
CheckpointError naming the directory, the key or --model-args (conversion, the tools' front,
re-raises it as its ConversionError).

`base_state` reads every model tensor, one key at a time, for the loaders that fill a model from
a base checkpoint's global tensors (the methods' load_initial).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint.io import latest_iteration_dir
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords, read_records
from megatron_scale.model.args import ArchitectureError, LlamaArgs


class MegatronReader:
    """Global tensors of a torch_dist checkpoint by checkpoint key."""

    def __init__(self, directory: str | os.PathLike[str], records: CheckpointRecords | None = None) -> None:
        """`records`: the checkpoint's, where the caller has read them already (`directory` is
        then the checkpoint itself, not a run directory)."""
        self.dir = Path(directory)
        if not self.dir.is_dir():
            raise CheckpointError(f"checkpoint directory {self.dir} does not exist")
        try:  # a training run's --save directory: its newest checkpoint
            self.dir = latest_iteration_dir(self.dir) or self.dir
        except ValueError as e:
            raise CheckpointError(str(e)) from e
        self.records = read_records(self.dir) if records is None else records
        self.meta = mc.dist_checkpointing.load_tensors_metadata(str(self.dir))

    def names(self) -> list[str]:
        return sorted(k for k in self.meta if not k.startswith("optimizer"))

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._meta(key).global_shape)

    def _meta(self, key: str) -> Any:
        if key not in self.meta:
            raise CheckpointError(f"{self.dir}: checkpoint has no tensor {key!r}")
        return self.meta[key]

    def get(self, key: str) -> torch.Tensor:
        m = self._meta(key)
        out = {key: torch.empty(tuple(m.global_shape), dtype=m.dtype)}
        dcp.load(out, storage_reader=dcp.FileSystemReader(str(self.dir)), no_dist=True)
        return out[key]

    def base_state(self) -> dict[str, torch.Tensor]:
        """Every model tensor as its global value (optimizer entries left out), read one key at a
        time: what a method fills a model from when it starts from a base (methods/ load_initial).
        Every rank holds the whole base (fine up to a few billion parameters in host memory)."""
        return {key: self.get(key) for key in self.names()}

    def model_args(self, override: str | os.PathLike[str] | None = None) -> LlamaArgs:
        """The recorded model arguments, or those of `override` (--model-args FILE.json)."""
        if override is not None:
            path = Path(override)
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise CheckpointError(f"--model-args {path}: cannot read it as JSON ({e})") from e
            return _model_args(record, f"--model-args {path}")
        if self.records.model_args is None:
            raise CheckpointError(
                f"{self.dir}: the checkpoint records no model arguments (it was not written by "
                "convert_hf_to_megatron, upscale_checkpoint or a training run that records them); "
                "pass --model-args FILE.json"
            )
        return _model_args(self.records.model_args, f"{self.dir}: model_args")

    def check_shapes(self, expected: dict[str, tuple[int, ...]]) -> None:
        """Every expected key exists with its global shape."""
        for key, shape in expected.items():
            if key not in self.meta:
                raise CheckpointError(f"{self.dir}: checkpoint has no tensor {key!r}")
            if self.shape(key) != tuple(shape):
                raise CheckpointError(
                    f"{self.dir}: tensor {key!r} has shape {self.shape(key)}, the model arguments "
                    f"imply {tuple(shape)}"
                )


def _model_args(record: Any, where: str) -> LlamaArgs:
    try:
        return LlamaArgs.from_json(record, where=where)
    except ArchitectureError as e:
        raise CheckpointError(str(e)) from e

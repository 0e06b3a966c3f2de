"""A checkpoint becomes a loaded model here, and only here: evaluation, the route sweep, conversion
(the offline upscaling) and training's --load all call `load_model`.

    load_model(load, parallel, device)                      the model the checkpoint holds
        reader -> recorded_method -> build_model -> load_checkpoint (as saved: sharded at this
        layout, the frozen base's digest verified)
    load_model(load, parallel, device, method=m, args=a)    the model `m` builds, its first weights
        reader -> build_model -> m.load_initial (its own checkpoint as saved; a base upscaled,
        grown or given fresh adapters)

Either way the layout only has to split the model (any TP x PP the checkpoint was saved at or
not). The model comes back in the mode it was built in (training mode); evaluators call .eval().
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from megatron_scale.checkpoint.io import load_checkpoint
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.checkpoint.records import CheckpointRecords
from megatron_scale.methods import TrainingMethod, recorded_method
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Kernels, Parallel, build_model


@dataclass(frozen=True)
class Loaded:
    """A loaded model and where it came from."""

    model: Any
    """This rank's model chunk, on the device asked for."""
    method: TrainingMethod
    """What it was built for (the recorded method, or the one given)."""
    reader: MegatronReader
    """The checkpoint (a run directory's newest), its records read."""
    loaded: str
    """What was loaded: "checkpoint" (as saved), or what the method's load_initial says."""


def load_model(load: str | os.PathLike[str], parallel: Parallel = Parallel(), device: torch.device | None = None, *,
               method: TrainingMethod | None = None, args: LlamaArgs | None = None, kernels: Kernels = Kernels(),
               records: CheckpointRecords | None = None) -> Loaded:
    """This rank's chunk of a model filled from the checkpoint (or training run directory: its
    newest checkpoint) `load`, at `parallel`, on `device` (None: where it was built); see the module
    docstring. `method` None: the model the checkpoint records (its architecture and method), as
    saved. `method` given: that method's model on `args` (default: the recorded architecture)
    built with `kernels`, filled by method.load_initial. `records`: the checkpoint's, where the
    caller has read them already (`load` is then the checkpoint itself)."""
    reader = MegatronReader(load, records=records)
    as_saved = method is None
    method = recorded_method(reader.records) if method is None else method
    args = reader.model_args() if args is None else args
    layers = method.model_layers(args.num_layers)
    if layers % parallel.pp:
        raise ValueError(f"--pipeline-model-parallel-size {parallel.pp}: {reader.dir} has {layers} layers, "
                         "not a multiple of it")
    model = build_model(args, method, parallel, kernels)
    if device is not None:
        model = model.to(device)  # a no-op where megatron-core built it there already
    if as_saved:
        load_checkpoint(model, reader.dir, records=reader.records, method=method)
        return Loaded(model=model, method=method, reader=reader, loaded="checkpoint")
    return Loaded(model=model, method=method, reader=reader, loaded=method.load_initial(model, reader, args.num_layers))

"""Run checkpoints: everything a resumed run needs to continue as if never stopped.

    <save>/iter_0000010/                    a megatron-scale checkpoint (checkpoint/io.py): the
                                            model, the optimizer's sharded state, each rank's RNG
                                            state, and train_state (iteration, consumed samples,
                                            LR scheduler) and layout (TP/PP/DP, optimizer-state
                                            format: checkpoint/layout.py) in the common state
    <save>/latest_checkpointed_iteration.txt   written last, atomically (Megatron-LM's marker)

A crash during a save leaves `iter_*.partial` and the old marker: the previous checkpoint stays
the one a resume finds. A crash after the rename but before the marker leaves a complete
`iter_N` the marker does not name: uncommitted, never loaded, and replaced when the resumed run
saves iteration N again.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale import hooks
from megatron_scale.durable import atomic_write
from megatron_scale.checkpoint.io import MARKER, iteration_dir, load_checkpoint, save_checkpoint
from megatron_scale.checkpoint.layout import FULLY_RESHARDABLE, MODEL_SPACE, SavedLayout
from megatron_scale.checkpoint.records import CheckpointRecords, RecordedMethod, read_records
from megatron_scale.flags import check_iterations, flag, positive
from megatron_scale.model.weights.state import tree_map


@dataclass(kw_only=True)
class CheckpointConfig:
    """Where the run starts from and saves to."""

    load: str | None = field(default=None, metadata=flag("--load"))
    """SCALE checkpoint dir, or a base checkpoint (+ --scale-*), or a run directory to resume."""
    save: str | None = field(default=None, metadata=flag("--save"))
    """The run directory checkpoints go to."""
    save_interval: int | None = field(default=None, metadata=flag("--save-interval"))
    """Save every N iterations (and at the end)."""
    save_iterations: tuple[int, ...] = field(default=(), metadata=flag("--save-iterations", metavar="ITER"))
    """Save at these iterations too (besides --save-interval and the end), e.g. those of
    --eval-iterations, so every evaluated model can be scored again later."""
    exit_signal_save: bool = field(default=False, metadata=flag("--exit-signal-save"))
    """On SIGTERM/SIGINT save before exiting."""

    def validate(self, train_iters: int | None = None) -> None:
        """(--load is checked where it is read: training/plan.py load_source.)"""
        positive(("--save-interval", self.save_interval))
        check_iterations("--save-iterations", self.save_iterations, train_iters, first=1)
        for name, given in (("--save-interval", self.save_interval is not None), ("--save-iterations", bool(self.save_iterations)),
                            ("--exit-signal-save", self.exit_signal_save)):
            if given and self.save is None:
                raise ValueError(f"{name} needs --save")


def optimizer_metadata(fmt: str) -> dict[str, str]:
    """The `metadata` megatron-core's optimizer.sharded_state_dict takes to save or load `fmt`."""
    return {} if fmt == MODEL_SPACE else {"distrib_optim_sharding_type": fmt}



def _rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _rng_object(state: Any) -> Any:
    ps = mc.parallel_state
    return mc.ShardedObject(
        "rng_state", state,
        (ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()),
        (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
        replica_id=ps.get_data_parallel_rank(),
    )


def _per_layer(entry: Any) -> Any:
    """An optimizer-state entry of a layer-stacked parameter, keyed per layer instead.

    megatron-core stacks the layers of a parameter into one global tensor [L, ...], and a saved
    global tensor must be complete. Freeze and LLaMA-Pro train only some layers, so Adam's moments
    exist for only some rows of [L, ...]; keyed per layer (`<key>.layer<i>`, the layer axis
    dropped) each is complete. Factories (SwiGLU's fc1) get the same treatment on what they build."""
    if isinstance(entry, mc.ShardedTensorFactory):
        return dataclasses.replace(entry, build_fn=lambda *a, _build=entry.build_fn: tree_map(_per_layer, _build(*a)))
    if isinstance(entry, mc.ShardedTensor) and entry.prepend_axis_num >= 1 and ".layers." in entry.key:
        return dataclasses.replace(
            entry, key=f"{entry.key}.layer{entry.global_offset[0]}", global_shape=entry.global_shape[1:],
            global_offset=entry.global_offset[1:], axis_fragmentations=entry.axis_fragmentations[1:],
            prepend_axis_num=entry.prepend_axis_num - 1,
        )
    return entry


def _zero_padding(entries: Any) -> Any:
    """The distributed optimizer's 'dp_reshardable' entries cover each bucket's padding with
    tensors megatron-core allocates with torch.empty and never fills: saved as they are, a
    checkpoint holds whatever memory they got, and two saves of the same state differ. Each
    padding piece is a dict marked `padding` (a LocalNonpersistentObject holding True); its
    tensors are zeroed here before saving. They are the padding's own, not views of the state."""
    if isinstance(entries, dict):
        if getattr(entries.get("padding"), "obj", False) is True:
            for v in entries.values():
                if isinstance(v, mc.ShardedTensor):
                    v.data.zero_()
        for v in entries.values():
            _zero_padding(v)
    elif isinstance(entries, list | tuple):
        for v in entries:
            _zero_padding(v)
    return entries


def _optimizer_entries(optimizer: Any, model_sd: dict, loading: bool, meta: dict[str, str] | None) -> Any:
    entries = optimizer.sharded_state_dict(model_sd, is_loading=loading, metadata=meta)
    return tree_map(_per_layer, entries if loading else _zero_padding(entries))


def _torch_optimizers(optimizer: Any) -> list[Any]:
    return [o.optimizer for o in getattr(optimizer, "chained_optimizers", [optimizer])]


def _adam_step(optimizer: Any) -> float | None:
    """Adam's step count, wherever the optimizer megatron-core picked keeps it: torch's Adam (no
    TE or apex, as on CPU) per parameter in its state; TE's FusedAdam (megatron-core's pick
    wherever Transformer Engine imports) per param group."""
    inner = _torch_optimizers(optimizer)
    steps = {float(v["step"]) for o in inner for v in o.state.values() if "step" in v}
    steps |= {float(g["step"]) for o in inner for g in o.param_groups if "step" in g and g["params"]}
    return max(steps) if steps else None


def _set_adam_step(optimizer: Any, step: float | None) -> None:
    """megatron-core 0.19.2's distributed optimizer, on torch's Adam, restores the moments but
    leaves `step` at its placeholder value; bias correction then differs from the uninterrupted
    run. The step is saved with the train state and set here, for torch's Adam in each
    parameter's state and for TE's FusedAdam in each param group (megatron-core restores that one
    itself; setting it again keeps the two optimizers on one path, and a group's dtype is kept)."""
    if step is None:
        return
    for o in _torch_optimizers(optimizer):
        for v in o.state.values():
            if "step" in v:
                v["step"] = torch.tensor(step, dtype=v["step"].dtype if torch.is_tensor(v["step"]) else torch.float32)
        for g in o.param_groups:
            if "step" in g and g["params"]:
                g["step"] = torch.full_like(g["step"], step) if torch.is_tensor(g["step"]) else int(step)


def _committed(save: str) -> int:
    """The iteration the run directory's marker names (0: none yet)."""
    marker = Path(save) / MARKER
    text = marker.read_text().strip() if marker.exists() else ""
    return int(text) if text.isdigit() else 0


def _drop_uncommitted(save: str, iteration: int) -> None:
    """Collective. `iter_N` beyond the marker was left by a run killed between its rename and its
    marker; this run resumed from before it and now saves N itself: rank 0 removes the old one.
    One at or below the marker is committed: save_checkpoint refuses to overwrite it."""
    if not iteration_dir(save, iteration).exists():  # the same answer on every rank: nothing
        return                                         # changes it until the barrier below
    dist.barrier()
    if dist.get_rank() == 0 and iteration > _committed(save):
        shutil.rmtree(iteration_dir(save, iteration))
    dist.barrier()


def _load_fully_reshardable(optimizer: Any, state: dict) -> None:
    """megatron-core 0.19.2's distributed optimizer loads fully_reshardable state by copying, per
    parameter, every tensor of torch's per-parameter optimizer state from the checkpoint's, but
    leaves `step` out of what it reads; torch's own Adam (no TE/apex, as on CPU) keeps `step` as a
    tensor there, so the copy fails on it (KeyError 'step'). The same load in two of its own steps,
    `step` set aside around the second: the common state (param groups, their step) first, then
    megatron-core's load_parameter_state_from_fully_reshardable."""
    param_state = state.pop("param_state")
    state.pop("param_state_sharding_type")
    optimizer.load_state_dict(state)
    inner = optimizer.optimizer.state
    steps = {p: v.pop("step") for p, v in inner.items() if torch.is_tensor(v.get("step"))}
    try:
        optimizer.load_parameter_state_from_fully_reshardable(param_state)
    finally:
        for p, step in steps.items():
            inner[p]["step"] = step


def _load_optimizer(optimizer: Any, state: dict) -> None:
    """optimizer.load_state_dict, the distributed optimizer's fully_reshardable state through
    _load_fully_reshardable (a chained optimizer's parts one by one, as megatron-core's does)."""
    chained = getattr(optimizer, "chained_optimizers", None)
    if chained is None or len(chained) == 1:
        parts = [(optimizer if chained is None else chained[0], state)]
    else:
        parts = list(zip(chained, (v for _, v in sorted(state.items())), strict=True))
    for opt, part in parts:
        if isinstance(part, dict) and part.get("param_state_sharding_type") == FULLY_RESHARDABLE:
            _load_fully_reshardable(opt, part)
        else:
            opt.load_state_dict(part)


def save_run(
    save: str, iteration: int, model: Any, optimizer: Any, scheduler: Any, consumed: int,
    layout: SavedLayout, model_args: dict[str, Any] | None = None, optim: dict[str, Any] | None = None, *,
    method: RecordedMethod,
) -> Path:
    """Collective: every rank calls. Returns the iteration directory. `model_args` (the run's
    architecture, training/plan.py) goes into the common state for the export tool; `layout`
    (the run's, checkpoint/layout.py run_layout) fixes the optimizer-state format and is recorded."""
    def extra(model_sd: dict) -> dict:
        return {
            "optimizer": _optimizer_entries(optimizer, model_sd, False, optimizer_metadata(layout.optimizer_format)),
            "rng_state": _rng_object(_rng_state()),
        }

    train_state = {"iteration": iteration, "consumed_samples": consumed, "scheduler": scheduler.state_dict(),
                   "adam_step": _adam_step(optimizer), **({"optim": optim} if optim is not None else {})}
    _drop_uncommitted(save, iteration)
    path = save_checkpoint(model, iteration_dir(save, iteration), extra, method=method, model_args=model_args,
                           layout=layout, train_state=train_state)
    if dist.get_rank() == 0:
        hooks.point("save-before-marker", checkpoint=path.name)
        atomic_write(Path(save) / MARKER, f"{iteration}\n")
    dist.barrier()
    return path


def load_run(
    path: Path, model: Any, optimizer: Any, scheduler: Any, optimizer_format: str, rng: bool = True,
    records: CheckpointRecords | None = None, *, method: RecordedMethod,
) -> tuple[int, int]:
    """Restore model, optimizer (its state saved in `optimizer_format`), scheduler and, with `rng`
    (the same TP x PP grid: checkpoint/layout.py), each rank's RNG from an iteration directory
    (`records`: its records, where the caller has read them already).
    Returns (iteration, consumed samples)."""
    # A fresh torch Adam has no state until its first step; the distributed optimizer needs it
    # allocated to describe its checkpoint entries (megatron-core's own loader does the same).
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        if hasattr(opt, "_init_optimizer_states_with_dummy_values") and not opt.optimizer.state:
            opt._init_optimizer_states_with_dummy_values()

    def extra(model_sd: dict) -> dict:
        return {
            "optimizer": _optimizer_entries(optimizer, model_sd, True, optimizer_metadata(optimizer_format)),
            **({"rng_state": _rng_object(None)} if rng else {}),
        }

    if records is None:
        records = read_records(path)
    state = records.train_state
    if state is None:
        raise ValueError(f"--load {path}: a model checkpoint without training state; cannot resume from it")
    loaded = load_checkpoint(model, path, extra, records=records, method=method)
    hooks.point("load", checkpoint=path.name)
    with torch.no_grad():  # the distributed optimizer copies into views of the parameters
        _load_optimizer(optimizer, loaded["optimizer"])
    _set_adam_step(optimizer, state.get("adam_step"))
    scheduler.load_state_dict(state["scheduler"])
    if rng:
        _set_rng_state(loaded["rng_state"])
    return int(state["iteration"]), int(state["consumed_samples"])

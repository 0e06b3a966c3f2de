"""Resuming at another layout: which checkpoints a run can resume at its own TP / PP / DP, decided
by training/plan.py before any process group exists, and the one line a resharding resume prints.

Every training checkpoint records the layout it was saved at (records.SavedLayout). Its optimizer
state is in one of three formats (records.OPTIMIZER_FORMATS):
    fully_reshardable  the distributed optimizer's state in model space: one global tensor per
                       parameter and Adam moment (gathered over DP on save, each rank slicing its
                       own part on load), so TP, PP and DP may all change;
    model_space        megatron-core's plain optimizer: the same global tensors, same keys;
    dp_reshardable     the distributed optimizer's buffers as they lie in memory (checkpoints from
                       before the layout record): resumable only at the TP and PP they were saved
                       at, with the distributed optimizer.
The model's own tensors always reshard (megatron-core's dist_checkpointing). The LR schedule,
iteration, consumed samples and Adam step are layout-free. The RNG state is one entry per
(PP, TP) rank: a resume at the same TP and PP restores it, another TP or PP keeps each rank's
seeded streams (as Megatron-LM does), which matters only with dropout.
"""

from __future__ import annotations

from megatron_scale.records import DP_RESHARDABLE, FULLY_RESHARDABLE, MODEL_SPACE, SavedLayout


def optimizer_format(distributed: bool) -> str:
    """The format a run's checkpoints store its optimizer state in."""
    return FULLY_RESHARDABLE if distributed else MODEL_SPACE


def optimizer_metadata(fmt: str) -> dict[str, str]:
    """The `metadata` megatron-core's optimizer.sharded_state_dict takes to save or load `fmt`."""
    return {} if fmt == MODEL_SPACE else {"distrib_optim_sharding_type": fmt}


def run_layout(tp: int, pp: int, dp: int, distributed: bool) -> SavedLayout:
    """The layout a run saves at (what its checkpoints record)."""
    return SavedLayout(tp=tp, pp=pp, dp=dp, distributed_optimizer=distributed, optimizer_format=optimizer_format(distributed))


def same_grid(saved: SavedLayout | None, run: SavedLayout) -> bool:
    """Whether the (PP, TP) grid is the saved one: each rank's RNG state can be restored."""
    return saved is None or (saved.tp, saved.pp) == (run.tp, run.pp)


def _grid(layout: SavedLayout) -> str:
    return f"--tensor-model-parallel-size {layout.tp} --pipeline-model-parallel-size {layout.pp}"


def check_resume(saved: SavedLayout | None, run: SavedLayout, where: str) -> str | None:
    """Refuse (ValueError, naming the flags and the reason) a resume the saved optimizer state
    cannot make at `run`'s layout; else the line saying what is resharded (None: same layout, or
    a checkpoint whose layout cannot be known, which then loads as it is)."""
    if saved is None:
        return None
    if saved.optimizer_format == DP_RESHARDABLE:
        if not run.distributed_optimizer:
            raise ValueError(f"{where}: its optimizer state is the distributed optimizer's dp_reshardable format "
                             "(per-bucket buffers), which only --use-distributed-optimizer reads; add the flag")
        if (saved.tp, saved.pp) != (run.tp, run.pp):
            raise ValueError(
                f"{where}: its optimizer state is the distributed optimizer's dp_reshardable format (per-bucket "
                f"buffers of the TP={saved.tp} PP={saved.pp} model it was saved at, from before megatron-scale "
                f"saved fully_reshardable state), which cannot be resharded to TP={run.tp} PP={run.pp}: resume it "
                f"with {_grid(saved)} and save once (the new checkpoint reshards), then change the layout")
    if saved.distributed_optimizer != run.distributed_optimizer:
        had = "with" if saved.distributed_optimizer else "without"
        flag = "add" if saved.distributed_optimizer else "drop"
        raise ValueError(f"{where}: the run being resumed trained {had} --use-distributed-optimizer; {flag} the "
                         "flag (switching the optimizer's kind on resume is not supported)")
    if (saved.tp, saved.pp, saved.dp) == (run.tp, run.pp, run.dp) or (saved.dp is None and same_grid(saved, run)):
        return None
    rng = "RNG restored" if same_grid(saved, run) else "RNG not carried (TP/PP changed: each rank keeps its seeded streams)"
    return (f"resharding {where.removeprefix('--load ')}: {saved.describe()} -> {run.describe()}; model, Adam "
            f"moments and step, LR schedule and data position carried, {rng}")

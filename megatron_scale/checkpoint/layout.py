"""The layout a training checkpoint was saved at (`SavedLayout`, its `layout` record), and resuming
at another one: which checkpoints a run can resume at its own TP / PP / DP, decided by
training/plan.py before any process group exists, and the one line a resharding resume prints.

Every training checkpoint records the layout it was saved at (records.py reads it; one from
before the layout record gets one read off its tensor index: `indexed_layout`). Its optimizer
state is in one of three formats (OPTIMIZER_FORMATS):
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

from dataclasses import dataclass
from typing import Any

# The optimizer-state formats of training checkpoints (training/checkpointing.py writes them):
FULLY_RESHARDABLE = "fully_reshardable"  # distributed optimizer, megatron-core's model-space format
DP_RESHARDABLE = "dp_reshardable"        # distributed optimizer, per-bucket (before the layout record)
MODEL_SPACE = "model_space"              # megatron-core's plain optimizer: one entry per parameter
OPTIMIZER_FORMATS = (FULLY_RESHARDABLE, DP_RESHARDABLE, MODEL_SPACE)


@dataclass(frozen=True)
class SavedLayout:
    """How a training checkpoint was laid out when saved: what a resume at another layout reshards."""

    tp: int
    pp: int
    dp: int | None
    """None where not recorded (a checkpoint from before the layout record)."""
    distributed_optimizer: bool
    optimizer_format: str
    """One of OPTIMIZER_FORMATS."""
    recorded: bool = True
    """False: read off the tensor index of a checkpoint from before the layout record."""

    def to_record(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "distributed_optimizer": self.distributed_optimizer,
                "optimizer_format": self.optimizer_format}

    @classmethod
    def from_record(cls, record: Any, where: str) -> SavedLayout:
        """The layout a `layout` record holds; ValueError naming `where` for anything else."""
        try:
            layout = cls(tp=int(record["tp"]), pp=int(record["pp"]), dp=int(record["dp"]),
                         distributed_optimizer=bool(record["distributed_optimizer"]),
                         optimizer_format=str(record["optimizer_format"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: not a layout record ({type(e).__name__}: {e})") from e
        if layout.optimizer_format not in OPTIMIZER_FORMATS:
            raise ValueError(f"{where}: optimizer_format {layout.optimizer_format!r} is none of "
                             f"{', '.join(OPTIMIZER_FORMATS)}")
        return layout

    def describe(self) -> str:
        """`TP=2 PP=1 DP=1, distributed optimizer (fully_reshardable)`."""
        dp = "?" if self.dp is None else self.dp
        optimizer = "distributed optimizer" if self.distributed_optimizer else "optimizer"
        return f"TP={self.tp} PP={self.pp} DP={dp}, {optimizer} ({self.optimizer_format})"


def indexed_layout(index: Any, where: str) -> SavedLayout | None:
    """The layout of a training checkpoint from before the layout record, read off its tensor
    index: the RNG entry is a (PP, TP) grid (`rng_state/shard_<pp>.<tp>_<PP>.<TP>`); the
    distributed optimizer wrote `optimizer.distributed.*` (dp_reshardable), the plain one
    `optimizer.state.*`. None where the index holds no RNG entry."""
    grid = None
    for key in index.state_dict_metadata:
        if key.startswith("rng_state/shard_"):
            shape = key.rsplit("_", 1)[1].split(".")
            try:
                grid = (int(shape[0]), int(shape[1]))
            except (IndexError, ValueError) as e:
                raise ValueError(f"{where}: RNG entry {key!r} names no (PP, TP) grid") from e
            break
    if grid is None:
        return None
    distributed = any(k.startswith("optimizer.distributed.") for k in index.state_dict_metadata)
    return SavedLayout(tp=grid[1], pp=grid[0], dp=None, distributed_optimizer=distributed,
                       optimizer_format=DP_RESHARDABLE if distributed else MODEL_SPACE, recorded=False)


def optimizer_format(distributed: bool) -> str:
    """The format a run's checkpoints store its optimizer state in."""
    return FULLY_RESHARDABLE if distributed else MODEL_SPACE


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

"""Resuming a run at another TP / PP / DP layout (checkpoint/layout.py), the optimizer's state carried.

Each case trains a tiny model without interruption for ITERS iterations at layout `from`, saving at
iteration SAVE_AT (the entry, under torchrun). The iteration-SAVE_AT checkpoint is then resumed at
layout `to` inside spawned ranks (the entry's own setup), which
  1. save what they loaded at once, at the new layout: every tensor of the saved checkpoint (the
     model, Adam's exp_avg and exp_avg_sq and the distributed optimizer's fp32 main parameters,
     all as global tensors) comes back bitwise, and so do the Adam step and the train state;
  2. train to ITERS: the losses are the uninterrupted run's within LOSS_ULPS float32 units in the
     last place of the loss. Not bitwise: another TP splits GEMMs and sums partial results in
     another order, another DP sums the batch's mean in another order (measured: at most 0.6 ulp,
     3e-7 at a loss of 4). A resume that dropped the moments or the step is off by far more
     (docs/reliability.md, "Resharding").

The matrix run in CI (`CASES`; method, from -> to, optimizer):
    scale-preserve   TP=2 -> TP=1          distributed optimizer (fully_reshardable)
    scale-preserve   TP=2 -> DP=2 (TP=1)   distributed optimizer (fully_reshardable)
    full             TP=1 -> PP=2          plain optimizer (model space)
MEGATRON_SCALE_RESHARD_MATRIX=1 adds (`MORE`): full both ways with either optimizer, scale-adapt,
freeze (--freeze-layers 1), lora and llama-pro (--llama-pro-blocks 4) between TP=1 and TP=2 / PP=2 /
DP=2 both ways, SCALE-Preserve to PP=2 and with the plain optimizer. Refusals (a layout the saved state cannot reach, the optimizer's kind switched) are
checked on the plan, before any rank starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests._dist import run_ranks
from megatron_scale.testing.runs import RUN, losses, make_dataset, train

pytestmark = pytest.mark.dist

ITERS, SAVE_AT = 6, 3
LOSS_ULPS = 4
LAYOUTS = {
    "TP=1": (1, ()), "TP=2": (2, ("--tensor-model-parallel-size", "2")),
    "PP=2": (2, ("--pipeline-model-parallel-size", "2")), "DP=2": (2, ()),
}
DISTRIBUTED = ("--use-distributed-optimizer",)


@dataclass(frozen=True)
class Case:
    method: str
    source: str
    target: str
    optimizer: tuple[str, ...] = DISTRIBUTED
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        kind = "distopt" if self.optimizer else "plain"
        return f"{self.method}-{self.source}-to-{self.target}-{kind}".replace("=", "")


CASES = [  # three resumes from two uninterrupted runs: 5 spawns. The first run is also the trained
    # base the other methods start from (a SCALE model upscaled from a random base gets no gradient).
    Case("full", "TP=1", "PP=2", optimizer=()),
    Case("scale-preserve", "TP=2", "TP=1"),
    Case("scale-preserve", "TP=2", "DP=2"),
]
MORE = [
    Case("full", "TP=1", "DP=2"), Case("full", "PP=2", "TP=1"), Case("full", "DP=2", "TP=2", optimizer=()),
    *(Case(m, a, b, extra=x) for m, x in (("scale-adapt", ()), ("freeze", ("--freeze-layers", "1")), ("lora", ()),
                                          ("llama-pro", ("--llama-pro-blocks", "4")))
      for a, b in (("TP=2", "TP=1"), ("PP=2", "TP=1"), ("DP=2", "TP=1"), ("TP=1", "TP=2"), ("TP=1", "PP=2"),
                   ("TP=1", "DP=2"))),
    Case("scale-preserve", "TP=1", "PP=2"), Case("scale-preserve", "DP=2", "TP=2"),
    Case("scale-preserve", "TP=2", "PP=2", optimizer=()),
]
if os.environ.get("MEGATRON_SCALE_RESHARD_MATRIX") == "1":
    CASES += MORE


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("reshard")
    return {"root": root, "data": make_dataset(root / "data", seed=1), "runs": {}}


def _flags(case: Case, layout: str, work: dict) -> tuple[int, list[str]]:
    """Ranks and flags of `case` at `layout`: every run the same schedule and data."""
    nproc, flags = LAYOUTS[layout]
    return nproc, ["--method", case.method, "--train-iters", str(ITERS), "--data-path", work["data"],
                   *flags, *case.optimizer, *case.extra]


def _uninterrupted(work: dict, case: Case) -> dict[str, Any]:
    """The run at `case.source`, saving at SAVE_AT (shared by the cases that resume it)."""
    key = (case.method, case.source, case.optimizer, case.extra)
    if key not in work["runs"]:
        name = f"{case.method}-{case.source}-{len(case.optimizer)}".replace("=", "")
        save = work["root"] / name
        nproc, flags = _flags(case, case.source, work)
        # full trains the tiny model from scratch; the others continue from that run's end
        base = [] if case == CASES[0] else ["--load", str(_uninterrupted(work, CASES[0])["save"] / f"iter_{ITERS:07d}")]
        got = losses(train(nproc, work["root"] / f"{name}.jsonl", *flags, *base, "--save", str(save),
                           "--save-interval", str(SAVE_AT)))
        assert sorted(got) == list(range(1, ITERS + 1))
        assert len(set(got.values())) == ITERS, got  # it learns: every step moves the loss
        work["runs"][key] = {"losses": got, "save": save, "ckpt": save / f"iter_{SAVE_AT:07d}"}
    return work["runs"][key]


def _resume_and_resave(rank: int, world: int, argv: list[str]) -> dict[int, float]:
    """The entry's setup at the new layout (it loads --load), an immediate save of what it loaded
    (--save), then training to the end; returns the losses (the same on every rank)."""
    from megatron_scale.training.config import parse
    from megatron_scale.training.loop import setup, train_step

    run = setup(parse(argv))
    assert run.iteration == SAVE_AT
    run.save()
    got = {}
    while run.iteration < run.config.schedule.train_iters:
        loss = train_step(run)["lm_loss"]
        got[run.iteration] = loss
    run.log.close()
    return got


def _tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    from megatron_scale.checkpoint.reader import MegatronReader

    reader = MegatronReader(ckpt)
    return {k: reader.get(k) for k in reader.meta}


def _common(ckpt: Path) -> dict[str, Any]:
    from megatron_scale import _mcore as mc

    return mc.dist_checkpointing.load_common_state_dict(str(ckpt))


def _within_ulps(a: float, b: float, ulps: int) -> bool:
    return abs(a - b) <= ulps * float(np.spacing(np.float32(abs(a))))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_resume_at_another_layout_carries_the_optimizer_state(work: dict, case: Case) -> None:
    from megatron_scale.checkpoint.records import read_records
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import plan

    source = _uninterrupted(work, case)
    resumed = work["root"] / f"{case.name}-resumed"
    resumed.mkdir()
    (resumed / f"iter_{SAVE_AT:07d}").symlink_to(source["ckpt"], target_is_directory=True)
    (resumed / "latest_checkpointed_iteration.txt").write_text(f"{SAVE_AT}\n")
    resaved = work["root"] / f"{case.name}-resaved"
    nproc, flags = _flags(case, case.target, work)
    argv = [*RUN, *flags, "--load", str(resumed), "--save", str(resaved)]

    # the plan (before any rank): the saved layout and the line the resume prints
    saved = read_records(source["ckpt"]).layout
    p = plan(parse(argv), nproc)
    assert saved is not None and saved.recorded and saved.optimizer_format == p.layout.optimizer_format
    assert (saved.tp, saved.pp, saved.dp) != (p.layout.tp, p.layout.pp, p.layout.dp)
    assert p.reshard is not None and f"{saved.describe()} -> {p.layout.describe()}" in p.reshard, p.reshard
    assert ("RNG restored" in p.reshard) == ((saved.tp, saved.pp) == (p.layout.tp, p.layout.pp))

    got = run_ranks(_resume_and_resave, nproc, argv)[0]

    # 1. what the new layout loaded is what the old one saved, bitwise (global tensors)
    before, after = _tensors(source["ckpt"]), _tensors(resaved / f"iter_{SAVE_AT:07d}")
    assert sorted(after) == sorted(before)
    moments = [k for k in before if k.startswith("optimizer.state.exp_avg")]
    # a check with teeth: most moments are nonzero (SCALE's layer-0 W22 and norm gain of qkv are not
    # moved: their input x_up starts as the zero E_up row)
    moved = [k for k in moments if before[k].abs().max() > 0]
    assert len(moved) > len(moments) // 2, (len(moved), len(moments))
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    old, new = _common(source["ckpt"]), _common(resaved / f"iter_{SAVE_AT:07d}")
    assert new["train_state"] == old["train_state"]
    assert old["train_state"]["adam_step"] == SAVE_AT
    assert read_records(resaved / f"iter_{SAVE_AT:07d}").layout == p.layout

    # 2. the continuation is the uninterrupted run's, to float32 rounding
    assert sorted(got) == list(range(SAVE_AT + 1, ITERS + 1))
    for it, loss in got.items():
        assert _within_ulps(loss, source["losses"][it], LOSS_ULPS), (it, loss, source["losses"][it])


def test_refusals_name_the_flag_and_the_reason(work: dict) -> None:
    """Before any rank: a distributed-optimizer run resumed without the flag, and the reverse."""
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import FlagError, plan

    source = _uninterrupted(work, CASES[1])  # scale-preserve, TP=2, distributed optimizer
    nproc, flags = _flags(Case("scale-preserve", "TP=1", "TP=1", optimizer=()), "TP=1", work)
    with pytest.raises(FlagError, match="trained with --use-distributed-optimizer; add the flag"):
        plan(parse([*RUN, *flags, "--load", str(source["save"])]), nproc)
    plain = _uninterrupted(work, CASES[0])  # full, TP=1, plain optimizer
    nproc, flags = _flags(Case("full", "TP=1", "TP=1"), "TP=1", work)
    with pytest.raises(FlagError, match="trained without --use-distributed-optimizer; drop the flag"):
        plan(parse([*RUN, *flags, "--load", str(plain["save"])]), nproc)

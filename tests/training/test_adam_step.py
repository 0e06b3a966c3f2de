"""The Adam step a run checkpoint saves and a resume sets (training/checkpointing.py), on both
state layouts megatron-core's optimizer can have: torch's Adam (per-parameter `step`, what every
CPU run uses) and TE's FusedAdam (per-param-group `step`, megatron-core's pick wherever
Transformer Engine imports: every TE run on a GPU). FusedAdam itself needs CUDA; its layout is
reproduced here from TE 2.20.2's optimizers/fused_adam.py (group["step"], an int tensor, or an
int; no per-parameter step)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from megatron_scale.training.checkpointing import _adam_step, _set_adam_step


def _chained(*inner: torch.optim.Optimizer) -> SimpleNamespace:
    return SimpleNamespace(chained_optimizers=[SimpleNamespace(optimizer=o) for o in inner])


def _torch_adam(steps: int) -> torch.optim.Adam:
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=0.1)
    for _ in range(steps):
        p.grad = torch.ones(3)
        opt.step()
    return opt


class _FusedAdamLayout(torch.optim.Optimizer):
    """TE FusedAdam's state layout: the step in each non-empty param group, moments per parameter."""

    def __init__(self, params: list[torch.Tensor], step: torch.Tensor | int) -> None:
        super().__init__(params, {"lr": 0.1})
        for g in self.param_groups:
            g["step"] = step
            for p in g["params"]:
                self.state[p] = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}


def test_torch_adam_step_round_trip() -> None:
    saved = _adam_step(_chained(_torch_adam(5)))
    assert saved == 5.0
    fresh = _torch_adam(1)
    _set_adam_step(_chained(fresh), saved)
    assert [float(v["step"]) for v in fresh.state.values()] == [5.0]


def test_fused_adam_group_step_is_read_and_set_keeping_its_type() -> None:
    params = [torch.nn.Parameter(torch.ones(2))]
    as_tensor = _FusedAdamLayout(params, torch.tensor([7], dtype=torch.int))
    assert _adam_step(_chained(as_tensor)) == 7.0
    fresh = _FusedAdamLayout([torch.nn.Parameter(torch.ones(2))], torch.tensor([1], dtype=torch.int))
    _set_adam_step(_chained(fresh), 7.0)
    step = fresh.param_groups[0]["step"]
    assert torch.is_tensor(step) and step.dtype == torch.int and step.tolist() == [7]
    as_int = _FusedAdamLayout([torch.nn.Parameter(torch.ones(2))], 1)
    _set_adam_step(_chained(as_int), 7.0)
    assert as_int.param_groups[0]["step"] == 7 and isinstance(as_int.param_groups[0]["step"], int)
    assert all("step" not in v for v in as_int.state.values()), "no per-parameter step is invented"


def test_an_empty_param_group_does_not_count() -> None:
    opt = _FusedAdamLayout([torch.nn.Parameter(torch.ones(2))], 4)
    opt.add_param_group({"params": [], "step": 0})  # TE does not advance empty groups
    assert _adam_step(_chained(opt)) == 4.0

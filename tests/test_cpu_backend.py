"""The CPU backend (megatron_scale/cpu_backend.py).

Every patching check runs in a fresh subprocess so the pytest process itself stays unpatched:
- before enabling, megatron-core's CUDA calls fail; after, they map to the CPU, idempotently;
- with CUDA present (simulated), enabling changes nothing and `--device cpu` is refused;
- another megatron-core version is refused;
- spawned over gloo (TP=1, DP=2): megatron-core's DistributedDataParallel, the distributed
  optimizer with grad clipping (both need the type() mapping) and the pipeline schedule train a
  plain GPTModel, and the distributed optimizer's losses equal the plain optimizer's.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks


def _python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_enable_maps_cuda_calls_to_cpu() -> None:
    last = _python(
        """
        import torch
        from megatron_scale import cpu_backend as cb
        try:
            torch.cuda.current_device(); before = "no error"
        except (AssertionError, RuntimeError):
            before = "error"
        assert not cb.is_cpu_backend_enabled()
        assert cb.enable_cpu_backend() and cb.enable_cpu_backend()   # idempotent
        assert cb.is_cpu_backend_enabled()
        z = torch.zeros(3, device="cuda")
        t = torch.ones(2).cuda().to("cuda")
        print(before, torch.cuda.current_device(), z.device, t.device, torch.ones(2).type(),
              torch.ones(2, dtype=torch.int64).type(), cb.resolve_device("auto"), cb.resolve_device("cpu"))
        """
    )
    assert last == "error cpu:0 cpu:0 cpu:0 torch.cuda.FloatTensor torch.LongTensor cpu cpu"


def test_refuses_where_cuda_is_present_and_names_the_flag() -> None:
    last = _python(
        """
        import torch
        torch.cuda.is_available = lambda: True
        cd = torch.cuda.current_device
        from megatron_scale import cpu_backend as cb
        assert cb.enable_cpu_backend() is False and not cb.is_cpu_backend_enabled()
        assert torch.cuda.current_device is cd
        try:
            cb.resolve_device("cpu")
        except ValueError as e:
            print(e)
        """
    )
    assert "--device cpu" in last and "CUDA is present" in last


def test_bad_device_values() -> None:
    from megatron_scale.cpu_backend import resolve_device

    with pytest.raises(ValueError, match="--device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda"):
            resolve_device("cuda")


def test_refuses_an_unchecked_megatron_version() -> None:
    last = _python(
        """
        from megatron_scale import cpu_backend as cb
        cb.CHECKED_MCORE_VERSION = "0.0.0"
        try:
            cb.enable_cpu_backend()
        except RuntimeError as e:
            print(e)
        """
    )
    assert "0.0.0" in last and "0.19.2" in last


def _train(use_distributed_optimizer: bool) -> list[float]:
    from megatron_scale import _mcore as mc

    cfg = _tiny.base_config(1)
    model = _tiny.build_base(cfg, True, _tiny.base_state_dict(True))
    ddp = mc.DistributedDataParallel(
        cfg,
        mc.DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, use_distributed_optimizer=use_distributed_optimizer
        ),
        module=model,
    )
    opt = mc.get_megatron_optimizer(
        mc.OptimizerConfig(
            optimizer="adam", lr=3e-3, clip_grad=1.0, params_dtype=torch.float32,
            use_distributed_optimizer=use_distributed_optimizer,
        ),
        [ddp],
    )
    cfg.finalize_model_grads_func = mc.finalize_model_grads
    rank = torch.distributed.get_rank()

    def step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        out = m(x["input_ids"], x["position_ids"], x["attention_mask"], labels=x["labels"])
        return out, lambda o: (o.float().mean(), {"lm loss": o.float().mean().detach()})

    losses = []
    for it in range(4):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        out = mc.get_forward_backward_func()(
            forward_step_func=step, data_iterator=iter([_tiny.batch(seed=10 * it + rank)]), model=[ddp],
            num_microbatches=1, seq_length=_tiny.SEQ, micro_batch_size=_tiny.BATCH, forward_only=False,
        )
        ok, grad_norm, _ = opt.step()
        assert ok and grad_norm is not None and grad_norm > 0
        losses.append(float(out[0]["lm loss"]))
    return losses


def _body(rank: int, world: int) -> dict[str, list[float]]:
    from megatron_scale.distributed import init_distributed

    assert init_distributed(1, 1, device="cpu") == torch.device("cpu", 0)  # the CPU backend's run device
    return {"plain": _train(False), "distopt": _train(True)}


@pytest.mark.dist
def test_megatron_training_machinery_runs_on_cpu() -> None:
    for r in run_ranks(_body, 2):
        assert r["plain"][-1] < r["plain"][0]
        assert r["distopt"] == pytest.approx(r["plain"], rel=1e-5, abs=1e-6)

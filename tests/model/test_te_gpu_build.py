"""tests/model/test_te_gpu.py's FP8 models built on CPU up to their first CUDA call, with the TE
stand-in (tests/model/_te_standin.py) and no apex: gradient-accumulation fusion reaches every TE
block (TE's fuse_wgrad_accumulation) while megatron-core's linears are not asked for apex's
fused_weight_gradient_mlp_cuda (its ColumnParallelLinear raises in __init__ when they are, as the
old configuration shows here). Also: the methods whose linears are megatron-core's refuse
--gradient-accumulation-fusion by name without apex."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from pathlib import Path
from typing import Any

import pytest

from megatron_scale.model.layers.te import apex_wgrad_kernel
from tests._dist import run_ranks


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers import te
    from tests.model import _te_standin
    from tests.model import test_te_gpu as gpu

    init_distributed(1, 1, device="cpu", seed=1234)
    te.use_stand_in(_te_standin)
    # te_backend()'s default attention is TE's, which imports TE itself: the stand-in's stand-in
    mc.te_extensions = lambda: SimpleNamespace(TEDotProductAttention=mc.DotProductAttention)
    out: dict[str, Any] = {}
    for recipe in ("delayed", "tensorwise"):
        cfg = dataclasses.replace(gpu._fp8_config(recipe), use_cpu_initialization=True)
        model = gpu._build_scale_te(cfg, True)
        blocks = [m for m in model.modules() if isinstance(m, _te_standin.Linear)]
        out[recipe] = {
            "config_fusion": cfg.gradient_accumulation_fusion,
            "te_blocks": len(blocks),
            "te_blocks_fused": all(m.fuse_wgrad_accumulation for m in blocks),
            "mcore_fused": any(getattr(m, "gradient_accumulation_fusion", False) for m in model.modules()),
            "all_on_cpu": all(p.device.type == "cpu" for p in model.parameters()),
        }
    try:  # the configuration test_te_gpu.py used before: megatron-core's fusion, which needs apex
        gpu._build_scale_te(dataclasses.replace(cfg, gradient_accumulation_fusion=True), True)
        out["old_config"] = "built"
    except RuntimeError as e:
        out["old_config"] = str(e)
    return out


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    return run_ranks(_body, 1)[0]


def test_this_machine_has_no_apex_kernel() -> None:
    assert not apex_wgrad_kernel(), "the tests below show a build without apex; this machine has it"


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
def test_the_fp8_model_builds_without_apex_with_te_fusing(built: dict[str, Any], recipe: str) -> None:
    r = built[recipe]
    assert r["config_fusion"] is False and r["all_on_cpu"], r
    assert r["te_blocks"] == 2 * 4 * 2 and r["te_blocks_fused"], r  # 2 layers x 4 linears x (W, [W21 W22])
    assert r["mcore_fused"] is False, r


def test_asking_megatron_core_for_the_fusion_needs_apex(built: dict[str, Any]) -> None:
    assert "fused_weight_gradient_mlp_cuda" in built["old_config"], built["old_config"]


def test_other_methods_refuse_the_flag_by_name_without_apex() -> None:
    from megatron_scale.model.args import LlamaArgs
    from megatron_scale.model.build import Kernels, build_model
    from megatron_scale.methods import Full

    args = LlamaArgs(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=4, ffn_hidden_size=128,
                     kv_channels=16, vocab_size=96, max_position_embeddings=64)
    kernels = Kernels(gradient_accumulation_fusion=True)  # the local path: megatron-core's linears, apex's kernel
    with pytest.raises(ValueError, match=r"--gradient-accumulation-fusion with this method on the local path needs "
                                         r"apex's fused_weight_gradient_mlp_cuda"):
        build_model(args, Full(), kernels=kernels)


def test_dense_te_linears_get_te_s_own_fusion() -> None:
    """On --transformer-impl transformer_engine the dense methods' TE linears accumulate through TE
    (build.py te_wgrad_fusion, as SCALE's do); modules without the attribute, or without weights of
    their own (containers), are left alone. The GPU test checks megatron-core's TE modules themselves."""
    import torch

    from megatron_scale.model.build import te_wgrad_fusion

    class TELike(torch.nn.Module):  # TE's modules read this attribute at each forward
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(2, 2))
            self.fuse_wgrad_accumulation = False

    class Container(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fuse_wgrad_accumulation = False
            self.a, self.b, self.local = TELike(), TELike(), torch.nn.Linear(2, 2)

    model = Container()
    assert te_wgrad_fusion(model) == 2
    assert model.a.fuse_wgrad_accumulation and model.b.fuse_wgrad_accumulation
    assert model.fuse_wgrad_accumulation is False and not hasattr(model.local, "fuse_wgrad_accumulation")


def test_the_te_body_runs_once_per_run_across_xdist_workers(tmp_path: Path) -> None:
    """tests/model/test_te_gpu.py's fixture under `-n 4`: four workers asking at once, one body."""
    import threading

    from tests.model.test_te_gpu import once_per_run

    calls: list[int] = []

    def body() -> dict[str, Any]:
        calls.append(1)
        return {"losses": [1.0, 0.5]}

    got: list[dict[str, Any]] = []
    workers = [threading.Thread(target=lambda: got.append(once_per_run("te", tmp_path, body))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(calls) == 1 and got == [{"losses": [1.0, 0.5]}] * 4

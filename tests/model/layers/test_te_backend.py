"""The Transformer Engine backend's own code (te_linear.py), on CPU, with TE's Linear replaced by
a torch stand-in of the same interface (tests/model/_te_standin.py). What this shows is how SCALE
composes TE's modules, not TE: the real thing is tests/model/test_te_gpu.py's (marked gpu).

At TP=1 (two data-parallel ranks), TP=2 and TP=2 with sequence parallelism, one spawn:
  1. the TE-composed model computes what the local one does: Preserve-head logits bitwise equal
     to the base model's, all logits and every gradient equal to the local backend's (fp32),
     frozen blocks without gradient, TP attributes set for megatron-core;
  2. both backends write the same checkpoint entries, a local checkpoint loads into the TE model
     and back (digest checked, same logits), the dict keys name the TE model's own state;
  3. the FP8-cast flags TE is handed: the trainable blocks follow megatron-core's
     `is_first_microbatch`, the frozen base is recast on the first microbatch of only the first
     two steps, and again after a load;
  4. gradient-accumulation fusion reaches TE; an FP8 run with a dimension TE cannot take in FP8
     stops naming --fp8-format.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks

SETTINGS = ((1, False), (2, False), (2, True))  # (tp, sequence_parallel)


def _to_local_name(name: str) -> str:
    return (name.replace(".base_gemm.weight", ".weight").replace(".up_gemm.weight", ".weight_up")
            .replace(".w12_gemm.weight", ".weight_12"))


def _te_linears(model: Any) -> list[Any]:
    from megatron_scale.model.layers.te_linear import _TEBlocks

    return [m for m in model.modules() if isinstance(m, _TEBlocks)]


def _checkpoint_keys(model: Any) -> set[str]:
    return {v.key for v in model.sharded_state_dict().values()}


def _forward_loss(model: Any, b: dict) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(b["input_ids"], b["position_ids"], b["attention_mask"])
    return logits, logits.float().square().mean()


def _compare(tp: int, sp: bool, backend: Any, scale: Any, tag: str) -> dict[str, Any]:
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict

    res: dict[str, Any] = {}
    state = _tiny.base_state_dict(tied=False)
    cfg = _tiny.base_config(tp, sequence_parallel=sp)
    b = _tiny.batch(seed=5)
    torch.manual_seed(11)
    local = _tiny.build_scale(cfg, scale, False, state)
    te_model = _tiny.build_scale(cfg, scale, False, state, backend=backend)
    load_global_state_dict(te_model, global_state_dict(local))  # the same expansion values
    base = _tiny.build_base(_tiny.base_config(tp, sequence_parallel=sp), False, state).eval() if not sp else None
    if base is not None:
        with torch.no_grad(), output_head(te_model, "preserve"):
            ref = base(b["input_ids"], b["position_ids"], b["attention_mask"])
            res["preserve_head_bitwise"] = torch.equal(
                te_model(b["input_ids"], b["position_ids"], b["attention_mask"]), ref
            )
    z_local, loss_local = _forward_loss(local, b)
    z_te, loss_te = _forward_loss(te_model, b)
    res["logits_err"] = float((z_local - z_te).abs().max())
    loss_local.backward()
    loss_te.backward()
    grads_local = {n: p.grad for n, p in local.named_parameters() if p.grad is not None}
    grads_te = {_to_local_name(n): p.grad for n, p in te_model.named_parameters() if p.grad is not None}
    res["same_params_graded"] = sorted(grads_local) == sorted(grads_te) and len(grads_te) > 0
    res["grad_rel_err"] = max(
        float((grads_local[k] - grads_te[k]).abs().max() / grads_local[k].abs().max().clamp_min(1e-12))
        for k in grads_local
    )
    linears = _te_linears(te_model)
    res["linears"] = len(linears)
    res["frozen_no_grad"] = all(m.weight.grad is None and not m.weight.requires_grad for m in linears)
    res["tp_attributes"] = all(
        p.tensor_model_parallel == (tp > 1) and p.partition_dim == m.split.tp_axis
        for m in linears for p in (m.weight, m.weight_up, m.weight_12) if p is not None
    )
    res["ckpt_keys_equal"] = _checkpoint_keys(local) == _checkpoint_keys(te_model)
    own = set(te_model.state_dict())
    res["dict_keys_are_own_state"] = all(k in own for k in te_model.sharded_state_dict())
    return {f"{tag}/{k}": v for k, v in res.items()}


def _cast_flags(tp: int, backend: Any, scale: Any, ckpt: Path) -> dict[str, Any]:
    """Steps of two microbatches; then a local checkpoint loaded into the TE model, and back."""
    from megatron_scale.checkpoint import load_checkpoint, save_checkpoint
    from megatron_scale.methods import Scale

    res: dict[str, Any] = {}
    state = _tiny.base_state_dict(tied=True)
    cfg = _tiny.base_config(tp)
    b = _tiny.batch(seed=6)
    model = _tiny.build_scale(cfg, scale, True, state, backend=backend)

    def step() -> None:
        for m in model.modules():
            if hasattr(m, "is_first_microbatch"):
                m.is_first_microbatch = True  # what megatron-core's schedule does on FP8 runs
        with torch.no_grad():
            for _ in range(2):
                model(b["input_ids"], b["position_ids"], b["attention_mask"])

    linears = _te_linears(model)
    for m in linears:
        m.base_gemm.flags.clear()
        m.up_gemm.flags.clear()
    for _ in range(4):
        step()
    res["base_flags"] = [list(m.base_gemm.flags) for m in linears]
    res["up_flags"] = [list(m.up_gemm.flags) for m in linears]
    res["w12_flags"] = [list(m.w12_gemm.flags) for m in linears if m.w12_gemm is not None]

    local = _tiny.build_scale(cfg, scale, True, state)
    with torch.no_grad():
        for p in local.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    method = Scale(dims=model.scale_dims)  # what the checkpoints record: the geometry both share
    save_checkpoint(local, ckpt / f"local_tp{tp}", method=method)
    load_checkpoint(model, ckpt / f"local_tp{tp}", method=method)  # raises on a digest or key mismatch
    res["extra_state_kept"] = all(  # handed an empty state (keep your own), never a pickle
        m.base_gemm.loaded_extra_state is not None and m.base_gemm.loaded_extra_state.numel() == 0 for m in linears
    )
    with torch.no_grad():
        z_local = local(b["input_ids"], b["position_ids"], b["attention_mask"])
        z_te = model(b["input_ids"], b["position_ids"], b["attention_mask"])
    res["loaded_logits_err"] = float((z_local - z_te).abs().max())
    for m in linears:
        m.base_gemm.flags.clear()
    step()
    res["base_flags_after_load"] = [list(m.base_gemm.flags) for m in linears]

    save_checkpoint(model, ckpt / f"te_tp{tp}", method=method)
    back = _tiny.build_scale(cfg, scale, True, state)
    load_checkpoint(back, ckpt / f"te_tp{tp}", method=method)
    with torch.no_grad():
        res["back_logits_err"] = float(
            (back(b["input_ids"], b["position_ids"], b["attention_mask"]) - z_te).abs().max()
        )
    return res


def _config_checks(backend: Any) -> dict[str, Any]:
    from megatron_scale.model.layers.partition import BlockSplit

    res: dict[str, Any] = {}
    cfg = copy.copy(_tiny.base_config(1))
    cfg.gradient_accumulation_fusion = True
    split = BlockSplit(parallel="column", in_base=64, in_up=16, out_base=128, out_up=32)
    lin = backend.column_linear(80, 160, split=split, config=cfg, init_method=torch.nn.init.zeros_)
    res["fusion_reaches_te"] = lin.base_gemm.fuse_wgrad_accumulation and lin.up_gemm.fuse_wgrad_accumulation
    cfg.fp8 = "hybrid"
    backend.column_linear(80, 160, split=split, config=cfg, init_method=torch.nn.init.zeros_)  # all /16
    odd = BlockSplit(parallel="column", in_base=64, in_up=16, out_base=128, out_up=24)
    try:
        backend.column_linear(80, 152, split=odd, config=cfg, init_method=torch.nn.init.zeros_)
        res["fp8_dims_refused"] = "no error"
    except ValueError as e:
        res["fp8_dims_refused"] = str(e)
    return res


def _body(rank: int, world: int, ckpt: str) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers import te
    from megatron_scale.model.layers.spec import te_backend
    from tests.model import _te_standin

    te.use_stand_in(_te_standin)
    backend = te_backend(core_attention=mc.DotProductAttention)
    preserve = ScaleConfig(variant="preserve")
    adapt = ScaleConfig(variant="adapt", adapt_modules=("qkv", "proj", "fc1", "fc2"))
    out: dict[str, Any] = {}
    init_distributed(1, 1, device="cpu", seed=1234)
    current = 1
    for tp, sp in SETTINGS:
        if tp != current:
            mc.parallel_state.destroy_model_parallel()
            mc.parallel_state.initialize_model_parallel(tp)
            mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
            current = tp
        key = f"tp{tp}{'_sp' if sp else ''}"
        out[key] = {
            **_compare(tp, sp, backend, preserve, "preserve"),
            **_compare(tp, sp, backend, adapt, "adapt"),
        }
        if not sp:
            out[key]["flags"] = _cast_flags(tp, backend, adapt, Path(ckpt))
    out["config"] = _config_checks(backend) if current == 2 else {}
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(_body, 2, str(tmp_path_factory.mktemp("te_ckpt")))


def _keys() -> list[str]:
    return [f"tp{tp}{'_sp' if sp else ''}" for tp, sp in SETTINGS]


@pytest.mark.dist
@pytest.mark.parametrize("key", _keys())
def test_te_composition_computes_the_local_model(results: list, key: str) -> None:
    for r in results:
        res = r[key]
        for tag in ("preserve", "adapt"):
            assert res[f"{tag}/linears"] == 4 * _tiny.LAYERS
            if not key.endswith("_sp"):
                assert res[f"{tag}/preserve_head_bitwise"]
            assert res[f"{tag}/logits_err"] < 1e-5, res
            assert res[f"{tag}/same_params_graded"]
            assert res[f"{tag}/grad_rel_err"] < 1e-4, res
            assert res[f"{tag}/frozen_no_grad"]
            assert res[f"{tag}/tp_attributes"]
            assert res[f"{tag}/ckpt_keys_equal"]
            assert res[f"{tag}/dict_keys_are_own_state"]


@pytest.mark.dist
@pytest.mark.parametrize("key", ["tp1", "tp2"])
def test_frozen_fp8_cast_is_cached_and_checkpoints_interchange(results: list, key: str) -> None:
    for r in results:
        f = r[key]["flags"]
        assert f["base_flags"] and all(fl == [True, False, True, False] + [False] * 4 for fl in f["base_flags"])
        assert all(fl == [True, False] * 4 for fl in f["up_flags"] + f["w12_flags"])
        assert f["w12_flags"]  # Adapt (upper layers, every module) has W12 blocks, each asked
        assert f["extra_state_kept"]
        assert f["loaded_logits_err"] < 1e-5
        assert all(fl == [True, False] for fl in f["base_flags_after_load"])
        assert f["back_logits_err"] < 1e-5


@pytest.mark.dist
def test_fusion_and_fp8_dimensions(results: list) -> None:
    for r in results:
        c = r["config"]
        assert c["fusion_reaches_te"]
        assert c["fp8_dims_refused"].startswith("--fp8-format: Transformer Engine's FP8 GEMMs need"), c
        assert """{"m'": 12}""" in c["fp8_dims_refused"], c

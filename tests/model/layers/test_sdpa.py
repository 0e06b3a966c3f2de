"""--attention-backend: torch's scaled_dot_product_attention against megatron-core's local
DotProductAttention (model/layers/sdpa.py), fp32 on the CPU.

One spawn, 2 ranks, at TP=1 (two data-parallel replicas) and then TP=2:
  1. the base (GQA: 16 heads, 8 groups) and SCALE-Preserve (GQA plus the new heads and groups:
     20 / 10, per rank [base; new]) built with --attention-backend sdpa equal the same models
     built with local, every weight perturbed so the new heads reach the logits: loss, logits and
     every gradient within fp32 rounding;
  2. persistent preservation with SDPA on both sides: the Preserve model, trained 3 Adam steps,
     keeps the original-dim stream of every layer and the preservation-head logits bitwise the
     base's, while its new dims move;
  3. auto on the CPU is the local path, bitwise;
and at TP=1, on the module alone: the other mask types and a decode step go through the local
forward unchanged, and dropout is applied while training only.
The GPU test does 1-3 at TP=1 in bf16 on CUDA, where auto is SDPA.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks
from tests.conftest import requires_gpus

STEPS = 3


def _build(method: str, tp: int, backend: str, state: dict[str, torch.Tensor], dtype: str = "float32") -> Any:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.methods import Full, Scale
    from megatron_scale.model.build import Parallel, build_model
    from megatron_scale.model.weights.state import load_global_state_dict
    from megatron_scale.upscale import load_upscaled

    args = dataclasses.replace(_tiny.args(tied=False), params_dtype=dtype)
    kernels = dataclasses.replace(_tiny.KERNELS, attention_backend=backend)
    if method == "base":
        model = build_model(args, Full(), Parallel(tp=tp), kernels)
        load_global_state_dict(model, state)
    else:
        model = build_model(args, Scale.of(ScaleConfig(variant="preserve"), args, tp), Parallel(tp=tp), kernels)
        load_upscaled(model, state)
    return model.to(_tiny.device())


def _perturbed(model: Any, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor of `model` (global keys) plus noise: W_out_up and the new rows non-zero."""
    from megatron_scale.model.weights.state import global_state_dict

    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in global_state_dict(model).items()}


def _loss_and_grads(model: Any, b: dict) -> tuple[float, torch.Tensor, dict[str, torch.Tensor]]:
    """Mean loss, this rank's logits (vocab shard at TP=2) and the gradients of the mean loss."""
    with torch.no_grad():
        logits = model(b["input_ids"], b["position_ids"], b["attention_mask"])
    loss = model(b["input_ids"], b["position_ids"], b["attention_mask"], labels=b["labels"]).float().mean()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), logits, grads


def _attention_class(model: Any) -> str:
    """The core attention a layer runs; under Preserve's skip of the base stream's backward (the
    default) it runs in two calls, each of this class (split_attention.py)."""
    from megatron_scale.model.layers.split_attention import BaseHeadsApart

    core = model.decoder.layers[0].self_attention.core_attention
    if isinstance(core, BaseHeadsApart):
        assert type(core.base) is type(core.new)
        core = core.base
    return type(core).__name__


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def _equal_to_local(tp: int, dtype: str = "float32", sdpa: str = "sdpa") -> dict[str, Any]:
    """Check 1: loss, logits and gradients of `sdpa` against local (max relative error per tensor)."""
    from megatron_scale.model.weights.state import load_global_state_dict

    out: dict[str, Any] = {}
    base_state = _tiny.base_state_dict(tied=False)
    b = _tiny.batch(seed=11)
    for method in ("base", "preserve"):
        runs = {}
        state = None
        for backend in ("local", sdpa):
            model = _build(method, tp, backend, base_state, dtype)
            state = state or _perturbed(model, seed=5)
            load_global_state_dict(model, state)
            runs[backend] = _loss_and_grads(model, b)
            out[f"{method}/class/{backend}"] = _attention_class(model)
        (l0, z0, g0), (l1, z1, g1) = runs["local"], runs[sdpa]
        out[f"{method}/loss"] = (l0, l1)
        out[f"{method}/logits"] = _rel(z1, z0)
        out[f"{method}/grads"] = {n: _rel(g1[n], g0[n]) for n in g0} if sorted(g0) == sorted(g1) else None
        out[f"{method}/qkv_up_graded"] = any("linear_qkv.weight_up" in n for n in g0)
    return out


def _layer_outputs(model: Any) -> tuple[list[torch.Tensor], list[Any]]:
    outs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda m, i, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in model.decoder.layers]
    return outs, hooks


def _preserved(tp: int, backend: str = "sdpa", dtype: str = "float32") -> dict[str, Any]:
    """Check 2: Preserve trained a few steps with SDPA keeps the base stream bitwise (SDPA base)."""
    from megatron_scale.model.layers.heads import output_head

    state = _tiny.base_state_dict(tied=False)
    base = _build("base", tp, backend, state, dtype).eval()
    model = _build("preserve", tp, backend, state, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-2)
    train = _tiny.batch(seed=7)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(train["input_ids"], train["position_ids"], train["attention_mask"], labels=train["labels"])
        loss.float().mean().backward()
        opt.step()
    b = _tiny.batch(seed=3)
    model.eval()
    with torch.no_grad():
        ref_outs, h1 = _layer_outputs(base)
        ref = base(b["input_ids"], b["position_ids"], b["attention_mask"])
        outs, h2 = _layer_outputs(model)
        with output_head(model, "preserve"):
            z_p = model(b["input_ids"], b["position_ids"], b["attention_mask"])
    for h in h1 + h2:
        h.remove()
    d = _tiny.HIDDEN
    return {
        "class": _attention_class(model),
        "hidden_bitwise": [torch.equal(o[..., :d], r) for o, r in zip(outs, ref_outs, strict=True)],
        "hidden_up_nonzero": all(bool(o[..., d:].abs().sum() > 0) for o in outs),
        "preserve_head_bitwise": torch.equal(z_p, ref),
    }


def _auto_is_local_on_cpu(tp: int) -> dict[str, bool]:
    """Check 3: auto builds SDPAttention, which on the CPU runs megatron-core's forward: bitwise."""
    state = _tiny.base_state_dict(tied=False)
    b = _tiny.batch(seed=2)
    out = {}
    for method in ("base", "preserve"):
        with torch.no_grad():
            z = [_build(method, tp, backend, state).eval()(b["input_ids"], b["position_ids"], b["attention_mask"])
                 for backend in ("local", "auto")]
        out[method] = torch.equal(z[0], z[1])
    return out


def _module_checks() -> dict[str, Any]:
    """On the module: fallbacks to the local forward, and dropout."""
    from megatron_scale import _mcore as mc
    from megatron_scale.model.layers.sdpa import SDPAttention

    cfg = _tiny.base_config(1)
    dev = _tiny.device()
    g = torch.Generator().manual_seed(0)
    s, b, h, grp, k = _tiny.SEQ, 2, _tiny.HEADS, _tiny.GROUPS, _tiny.HEAD_DIM
    q, key, v = (torch.randn(s, b, n, k, generator=g).to(dev) for n in (h, grp, grp))
    mask = torch.rand(b, 1, s, s, generator=g).lt(0.3).to(dev)  # an arbitrary padding-style mask
    out: dict[str, Any] = {}
    local = mc.DotProductAttention(cfg, 1, mc.AttnMaskType.padding, "self")
    ours = SDPAttention(cfg, 1, mc.AttnMaskType.padding, "self", kernel="sdpa")
    out["padding_is_local"] = torch.equal(ours(q, key, v, mask), local(q, key, v, mask))
    causal_local = mc.DotProductAttention(cfg, 1, mc.AttnMaskType.causal, "self")
    causal = SDPAttention(cfg, 1, mc.AttnMaskType.causal, "self", kernel="sdpa")
    one = q[-1:]  # a decode step: one query against every key
    out["decode_is_local"] = torch.equal(causal(one, key, v, None), causal_local(one, key, v, None))
    out["padding_override_is_local"] = torch.equal(
        causal(q, key, v, mask, attn_mask_type=mc.AttnMaskType.padding),
        causal_local(q, key, v, mask, attn_mask_type=mc.AttnMaskType.padding))
    # causal: the kernel's own mask, the argument unread (megatron-core's contract)
    out["causal_ignores_mask"] = torch.equal(causal(q, key, v, mask), causal(q, key, v, None))
    out["causal_close"] = _rel(causal(q, key, v, None), causal_local(q, key, v, None))
    drop = SDPAttention(dataclasses.replace(cfg, attention_dropout=0.5), 1, mc.AttnMaskType.causal, "self")
    with torch.no_grad():
        evald = drop.eval()(q, key, v, None)
        trained = drop.train()(q, key, v, None)
    out["dropout_eval_close"] = _rel(evald, causal_local(q, key, v, None))
    out["dropout_train_differs"] = float((trained - evald).abs().max())
    return out


def _body(rank: int, world: int) -> dict[Any, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed

    init_distributed(1, 1, device="cpu", seed=1234)
    out: dict[Any, Any] = {"module": _module_checks()}
    for tp in (1, 2):
        if tp != 1:
            mc.parallel_state.destroy_model_parallel()
            mc.parallel_state.initialize_model_parallel(tp)
            mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
        out[tp] = {"equal": _equal_to_local(tp), "preserved": _preserved(tp), "auto": _auto_is_local_on_cpu(tp)}
    return out


@pytest.fixture(scope="module")
def results() -> list[dict[Any, Any]]:
    return run_ranks(_body, 2)


FP32 = 2e-5  # relative to each tensor's largest entry; the two kernels differ by fp32 rounding only


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_sdpa_equals_local_attention_forward_and_gradients(results: list, tp: int) -> None:
    for r in results:
        e = r[tp]["equal"]
        for method in ("base", "preserve"):
            assert e[f"{method}/class/local"] == "DotProductAttention"
            assert e[f"{method}/class/sdpa"] == "SDPAttention"
            l0, l1 = e[f"{method}/loss"]
            assert abs(l0 - l1) <= FP32 * abs(l0), e[f"{method}/loss"]
            assert e[f"{method}/logits"] <= FP32, e[f"{method}/logits"]
            grads = e[f"{method}/grads"]
            assert grads is not None and len(grads) > 0, method
            assert max(grads.values()) <= FP32, {k: v for k, v in grads.items() if v > FP32}
        assert e["preserve/qkv_up_graded"]  # the new heads' rows are among the gradients compared


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_preservation_bitwise_with_sdpa_on_both_sides(results: list, tp: int) -> None:
    for r in results:
        p = r[tp]["preserved"]
        assert p["class"] == "SDPAttention"
        assert len(p["hidden_bitwise"]) == _tiny.LAYERS and all(p["hidden_bitwise"]), p["hidden_bitwise"]
        assert p["hidden_up_nonzero"]
        assert p["preserve_head_bitwise"]


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_auto_is_the_local_path_on_cpu(results: list, tp: int) -> None:
    for r in results:
        assert r[tp]["auto"] == {"base": True, "preserve": True}


@pytest.mark.dist
def test_module_fallbacks_and_dropout(results: list) -> None:
    for r in results:
        m = r["module"]
        for key in ("padding_is_local", "decode_is_local", "padding_override_is_local", "causal_ignores_mask"):
            assert m[key], key
        assert m["causal_close"] <= FP32
        assert m["dropout_eval_close"] <= FP32
        assert m["dropout_train_differs"] > 0.1


def test_attention_backend_flag_errors() -> None:
    from megatron_scale.model.layers.sdpa import check_attention_backend
    from megatron_scale.training.config import parse

    with pytest.raises(ValueError, match="--attention-backend: 'flash' is not one of auto, local, sdpa"):
        check_attention_backend("flash")
    with pytest.raises(ValueError, match="--attention-backend sdpa needs --transformer-impl local"):
        check_attention_backend("sdpa", "transformer_engine")
    check_attention_backend("auto", "transformer_engine")
    base = ["--micro-batch-size", "1", "--global-batch-size", "1", "--lr", "1e-3", "--seq-length", "8",
            "--train-iters", "1", "--data-path", "unused"]
    assert parse(base).model.attention_backend == "auto"
    assert parse([*base, "--attention-backend", "local"]).model.attention_backend == "local"
    te = parse([*base, "--attention-backend", "sdpa", "--transformer-impl", "transformer_engine"])
    with pytest.raises(ValueError, match="--attention-backend sdpa needs --transformer-impl local"):
        te.validate_te()  # before TE's own checks: the message names this flag on any machine


def _gpu_body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.distributed import init_distributed

    init_distributed(1, 1, device="cuda", seed=1234)
    return {"equal": _equal_to_local(1, "bfloat16", sdpa="auto"), "preserved": _preserved(1, "auto", "bfloat16")}


@requires_gpus(1)
def test_sdpa_on_cuda_bf16() -> None:
    """CUDA, bf16, auto (= SDPA there): close to the local path (bf16 rounding: SDPA keeps the
    scores in fp32, megatron rounds them to bf16), and preservation bitwise with SDPA on both sides."""
    (r,) = run_ranks(_gpu_body, 1)
    e, p = r["equal"], r["preserved"]
    for method in ("base", "preserve"):
        assert e[f"{method}/class/auto"] == "SDPAttention"
        l0, l1 = e[f"{method}/loss"]
        assert abs(l0 - l1) <= 2e-2 * abs(l0), e[f"{method}/loss"]
        assert e[f"{method}/logits"] <= 5e-2, e[f"{method}/logits"]
    assert all(p["hidden_bitwise"]) and p["preserve_head_bitwise"] and p["hidden_up_nonzero"], p

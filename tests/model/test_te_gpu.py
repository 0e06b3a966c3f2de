"""SCALE's Transformer Engine backend on a GPU with Transformer Engine (marked gpu and te; skipped
with the reason elsewhere). One spawned rank:

  1. bf16: the SCALE-Preserve model on TE (te_backend) gives preservation-head logits bitwise
     equal to the base model built from the same TE pieces (TE linears, TE attention, the same
     RMSNorm), and close to megatron-core's fused TE GPT spec;
  2. FP8 (--fp8-format hybrid, delayed and tensorwise recipes) with gradient-accumulation fusion
     (TE's own, on SCALE's TE blocks; megatron-core's only where apex's kernel is installed, so a
     plain PyTorch GPU machine runs it too), through megatron-core's DDP, optimizer and schedule: the loss is finite and falls, frozen
     weights get neither grad nor main_grad while every trainable one has a main_grad, the frozen
     base keeps its bytes, and its cached FP8 copy is the same object, unchanged, from the third
     step on (the cast is not redone each step).
Both run once per pytest run, also under xdist (`once_per_run`).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests._dist import run_ranks
from tests.conftest import requires_gpus, requires_te

HIDDEN, HEADS, GROUPS, FFN, LAYERS, VOCAB, SEQ, BATCH = 256, 8, 4, 512, 2, 512, 64, 2


def _config(**extra: Any) -> Any:
    from megatron_scale import _mcore as mc

    return mc.TransformerConfig(
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS,
        ffn_hidden_size=FFN, normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, bias_activation_fusion=False, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=torch.bfloat16, bf16=True, init_method_std=0.02, **extra,
    )


def _gpt(cfg: Any, layer_spec: Any, state: dict | None) -> Any:
    from megatron_scale import _mcore as mc
    from megatron_scale.model.layers.norm import RMSNorm
    from megatron_scale.model.weights.state import load_global_state_dict

    block = mc.TransformerBlockSubmodules(layer_specs=[layer_spec] * LAYERS, layer_norm=RMSNorm)
    model = mc.GPTModel(cfg, block, vocab_size=VOCAB, max_sequence_length=SEQ, position_embedding_type="rope").cuda()
    if state is not None:
        load_global_state_dict(model, state)
    return model


def _unfused_te_layer() -> Any:
    """The base model on the TE pieces SCALE-TE uses: TE linears and attention, our RMSNorm."""
    from megatron_scale import _mcore as mc
    from megatron_scale.model.layers.norm import RMSNorm

    ext = mc.te_extensions()
    layer = mc.get_gpt_layer_local_spec(normalization="RMSNorm")
    sub = layer.submodules
    attention = replace(sub.self_attention, submodules=replace(
        sub.self_attention.submodules, linear_qkv=ext.TEColumnParallelLinear,
        linear_proj=ext.TERowParallelLinear, core_attention=ext.TEDotProductAttention,
    ))
    mlp = partial(mc.MLP.as_mlp_submodule, submodules=mc.MLPSubmodules(
        linear_fc1=ext.TEColumnParallelLinear, linear_fc2=ext.TERowParallelLinear))
    return replace(layer, submodules=replace(
        sub, input_layernorm=RMSNorm, pre_mlp_layernorm=RMSNorm, self_attention=attention, mlp=mlp))


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g).cuda()
    return {
        "input_ids": ids[:, :-1].contiguous(), "labels": ids[:, 1:].contiguous(),
        "position_ids": torch.arange(SEQ, device="cuda").expand(BATCH, SEQ).contiguous(),
        "attention_mask": torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool, device="cuda"), 1),
    }


def _fp8_config(recipe: str) -> Any:
    """FP8 with gradient-accumulation fusion: megatron-core's only with apex (model/layers/te.py)."""
    from megatron_scale.model.layers.te import apex_wgrad_kernel

    return _config(fp8="hybrid", fp8_recipe=recipe, gradient_accumulation_fusion=apex_wgrad_kernel())


def _build_scale_te(cfg: Any, wgrad_fusion: bool, backend: Any = None) -> Any:
    """The SCALE-Preserve model on TE, before its first CUDA call (tests/model/test_te_gpu_build.py
    builds it on CPU with a TE stand-in); `wgrad_fusion`: TE's own."""
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.build import build_scale_gpt
    from megatron_scale.model.layers.spec import te_backend

    return build_scale_gpt(
        cfg, ScaleConfig(variant="preserve", init="normal"), vocab_size=VOCAB, max_sequence_length=SEQ,
        position_embedding_type="rope", backend=backend or te_backend(wgrad_fusion=wgrad_fusion),
    )


def _scale_te(cfg: Any, state: dict, wgrad_fusion: bool = False) -> Any:
    from megatron_scale.upscale import load_upscaled

    model = _build_scale_te(cfg, wgrad_fusion).cuda()
    load_upscaled(model, state)
    return model


def _bf16_preservation() -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.model.weights.state import global_state_dict

    cfg = _config()
    torch.manual_seed(0)
    state = global_state_dict(_gpt(cfg, mc.get_gpt_layer_local_spec(normalization="RMSNorm"), None))
    b = _batch()
    fwd = (b["input_ids"], b["position_ids"], b["attention_mask"])
    with torch.no_grad():
        ref = _gpt(cfg, _unfused_te_layer(), state).eval()(*fwd)
        fused = _gpt(cfg, mc.te_extensions().get_gpt_layer_with_transformer_engine_spec(), state).eval()(*fwd)
        model = _scale_te(cfg, state).eval()
        with output_head(model, "preserve"):
            z_p = model(*fwd)
    return {
        "bitwise_vs_te_pieces": torch.equal(z_p, ref),
        "max_err_vs_te_pieces": float((z_p.float() - ref.float()).abs().max()),
        "max_err_vs_fused_te_spec": float((z_p.float() - fused.float()).abs().max()),
        "max_logit": float(ref.float().abs().max()),
    }


def _fp8_training(recipe: str) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.model.weights.state import global_state_dict
    from megatron_scale.model.layers.te_linear import _TEBlocks

    cfg = _fp8_config(recipe)
    torch.manual_seed(0)
    state = global_state_dict(_gpt(_config(), mc.get_gpt_layer_local_spec(normalization="RMSNorm"), None))
    model = _scale_te(cfg, state, wgrad_fusion=True)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    ddp = mc.DistributedDataParallel(cfg, mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True), module=model)
    opt = mc.get_megatron_optimizer(
        mc.OptimizerConfig(optimizer="adam", lr=3e-3, bf16=True, params_dtype=torch.bfloat16), [ddp]
    )
    cfg.finalize_model_grads_func = mc.finalize_model_grads
    fwd_bwd = mc.get_forward_backward_func()
    b = _batch()

    def forward_step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        out = m(x["input_ids"], x["position_ids"], x["attention_mask"], labels=x["labels"])
        return out, lambda o: (o.float().mean(), {"lm loss": o.float().mean().detach()})

    linears = [m for m in model.modules() if isinstance(m, _TEBlocks)]
    losses: list[float] = []
    cached: list[Any] = []
    snap: list[torch.Tensor] = []
    for step in range(8):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        out = fwd_bwd(forward_step_func=forward_step, data_iterator=iter([b, b]), model=[ddp],
                      num_microbatches=2, seq_length=SEQ, micro_batch_size=BATCH, forward_only=False)
        ok, _, _ = opt.step()
        assert ok
        losses.append(float(out[0]["lm loss"]))
        if step == 2:  # the base has been cast twice (FROZEN_RECASTS); from here on it is reused
            cached = [m.base_gemm._fp8_workspaces.get("weight") for m in linears]
            snap = [w._data.clone() for w in cached if w is not None]
    params = dict(model.named_parameters())
    return {
        "losses": losses,
        "finite": all(torch.isfinite(torch.tensor(losses)).tolist()),
        "frozen_unchanged": all(torch.equal(params[n], t) for n, t in frozen.items()),
        "frozen_no_grad_no_main_grad": all(
            params[n].grad is None and getattr(params[n], "main_grad", None) is None for n in frozen
        ),
        "trainable_main_grad": all(getattr(p, "main_grad", None) is not None for p in params.values() if p.requires_grad),
        "cast_cached": len(linears) > 0 and all(
            w is not None and w is m.base_gemm._fp8_workspaces.get("weight") for w, m in zip(cached, linears, strict=True)
        ),
        "cast_unchanged": len(snap) == len(linears) and all(
            torch.equal(t, w._data) for t, w in zip(snap, cached, strict=True)
        ),
    }


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.distributed import init_distributed

    init_distributed(1, 1, device="cuda", seed=1234)
    return {"bf16": _bf16_preservation(), **{f"fp8/{r}": _fp8_training(r) for r in ("delayed", "tensorwise")}}


def once_per_run(name: str, shared: Path, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`make()` once per pytest run however xdist spreads this file's tests over workers (each
    worker runs a module fixture of its own: with `-n 4` up to three copies of the TE body would
    share the one GPU). The first worker to take the lock runs it and leaves its JSON in `shared`,
    the folder every worker's temporary folders share; the others read it."""
    path = shared / f"{name}.json"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return json.loads(path.read_text())
        out = make()
        path.write_text(json.dumps(out))
        return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return run_ranks(_body, 1)[0]
    return once_per_run("te_gpu", tmp_path_factory.getbasetemp().parent, lambda: run_ranks(_body, 1)[0])


@requires_gpus(1)
@requires_te
def test_bf16_preservation_on_te(results: dict) -> None:
    r = results["bf16"]
    assert r["bitwise_vs_te_pieces"], r
    assert r["max_err_vs_fused_te_spec"] < 0.05 * max(1.0, r["max_logit"]), r


@requires_gpus(1)
@requires_te
@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
def test_fp8_trains_with_the_frozen_cast_cached(results: dict, recipe: str) -> None:
    r = results[f"fp8/{recipe}"]
    assert r["finite"] and r["losses"][-1] < r["losses"][0], r["losses"]
    assert r["frozen_unchanged"] and r["frozen_no_grad_no_main_grad"] and r["trainable_main_grad"], r
    assert r["cast_cached"] and r["cast_unchanged"], r

"""The one-node TE linears (te_fused.py, --scale-te-linear fused) on a GPU with Transformer Engine
(marked gpu and te; skipped with the reason elsewhere; tests/model/layers/test_te_fused.py checks the
composition on CPU with a stand-in). One spawned rank, bf16:

  1. Preserve's preservation head bitwise the base model on megatron-core's own TE GPT spec (norms
     fused into TELayerNormColumnParallelLinear: the base GEMM and the base norm are TE's very calls);
  2. logits and every gradient within bf16 tolerance of --scale-te-linear modules (te_linear.py);
  3. a layer's autograd nodes no more than megatron-core's dense TE layer's;
  4. skip_base_grad: every trainable gradient within bf16 tolerance of the full backward's;
  5. training through megatron-core's DDP, optimizer and schedule with TE's weight-gradient fusion:
     the loss falls, frozen weights get no main_grad and keep their bytes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
import torch

from tests._dist import run_ranks
from tests.conftest import requires_gpus, requires_te
from tests.model import test_te_gpu as te_gpu


def _fused_backend(wgrad_fusion: bool = False) -> Any:
    from megatron_scale.model.layers.spec import te_backend

    return te_backend(wgrad_fusion=wgrad_fusion, linear="fused")


def _build_fused(cfg: Any, state: dict, wgrad_fusion: bool = False) -> Any:
    """Preserve on the one-node TE linears, upscaled from the base `state` (built on CPU up to its
    first CUDA call by tests/model/layers/test_te_fused.py's spec, with the stand-in)."""
    from megatron_scale.upscale import load_upscaled

    model = te_gpu._build_scale_te(cfg, wgrad_fusion, backend=_fused_backend(wgrad_fusion)).cuda()
    load_upscaled(model, state)
    return model


def _grads(model: Any) -> dict[str, torch.Tensor]:
    from tests.model.layers.test_te_fused import _grads_by_key

    return _grads_by_key(model)


def _layer_nodes(layer: Any, width: int) -> int:
    from tests.model.layers.test_te_fused import _nodes

    x = torch.randn(te_gpu.SEQ, te_gpu.BATCH, width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mask = torch.triu(torch.ones(1, 1, te_gpu.SEQ, te_gpu.SEQ, dtype=torch.bool, device="cuda"), 1)
    out, _ = layer(hidden_states=x, attention_mask=mask)
    return len(_nodes(out, x))


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict

    init_distributed(1, 1, device="cuda", seed=1234)
    out: dict[str, Any] = {}
    cfg = te_gpu._config()
    torch.manual_seed(0)
    state = global_state_dict(te_gpu._gpt(cfg, mc.get_gpt_layer_local_spec(normalization="RMSNorm"), None))
    b = te_gpu._batch()
    fwd = (b["input_ids"], b["position_ids"], b["attention_mask"])
    dense = te_gpu._gpt(cfg, mc.te_extensions().get_gpt_layer_with_transformer_engine_spec(), state)
    fused = _build_fused(cfg, state)
    with torch.no_grad():
        ref = dense.eval()(*fwd)
        with output_head(fused, "preserve"):
            z_p = fused.eval()(*fwd)
    out["bitwise_vs_fused_te_spec"] = torch.equal(z_p, ref)
    out["max_err_vs_fused_te_spec"] = float((z_p.float() - ref.float()).abs().max())

    # against te_linear.py's composition, the expansion off its zero init
    modules = te_gpu._scale_te(cfg, state)
    with torch.no_grad():
        for p in modules.parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn_like(p))
    load_global_state_dict(fused, global_state_dict(modules))
    fused.train()
    z = {}
    for name, m in (("modules", modules), ("fused", fused)):
        z[name] = m(*fwd)
        z[name].float().square().mean().backward()
    g_mod, g_fused = _grads(modules), _grads(fused)
    out["logits_err"] = float((z["modules"].float() - z["fused"].float()).abs().max() / z["modules"].float().abs().max())
    out["grad_rel_err"] = max(float((g_mod[k].float() - g_fused[k].float()).abs().max()
                                    / g_mod[k].float().abs().max().clamp_min(1e-6)) for k in g_mod
                              if g_mod[k].abs().max() > 0)

    # skip_base_grad against the full backward
    skip = _build_fused(cfg, state)
    load_global_state_dict(skip, global_state_dict(modules))
    for m in skip.modules():
        if hasattr(m, "_call"):
            m._call = replace(m._call, skip=True)
    skip(*fwd).float().square().mean().backward()
    trainable = [n for n, p in skip.named_parameters() if p.requires_grad]
    full_g, skip_g = dict(fused.named_parameters()), dict(skip.named_parameters())
    out["skip_rel_err"] = max(float((full_g[n].grad.float() - skip_g[n].grad.float()).abs().max()
                                    / full_g[n].grad.float().abs().max().clamp_min(1e-6)) for n in trainable)

    out["nodes_fused"] = _layer_nodes(fused.decoder.layers[0], fused.config.hidden_size)
    out["nodes_dense_te"] = _layer_nodes(dense.decoder.layers[0], cfg.hidden_size)

    # training through megatron-core's DDP and optimizer, TE's own weight-gradient fusion
    model = _build_fused(cfg, state, wgrad_fusion=True)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    ddp = mc.DistributedDataParallel(cfg, mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True), module=model)
    opt = mc.get_megatron_optimizer(mc.OptimizerConfig(optimizer="adam", lr=3e-3, bf16=True,
                                                       params_dtype=torch.bfloat16), [ddp])
    cfg.finalize_model_grads_func = mc.finalize_model_grads

    def forward_step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        o = m(x["input_ids"], x["position_ids"], x["attention_mask"], labels=x["labels"])
        return o, lambda v: (v.float().mean(), {"lm loss": v.float().mean().detach()})

    losses = []
    for _ in range(6):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        res = mc.get_forward_backward_func()(forward_step_func=forward_step, data_iterator=iter([b, b]), model=[ddp],
                                             num_microbatches=2, seq_length=te_gpu.SEQ, micro_batch_size=te_gpu.BATCH,
                                             forward_only=False)
        ok, _, _ = opt.step()
        assert ok
        losses.append(float(res[0]["lm loss"]))
    params = dict(model.named_parameters())
    out["losses"] = losses
    out["frozen_ok"] = all(torch.equal(params[n], t) and getattr(params[n], "main_grad", None) is None
                           for n, t in frozen.items())
    out["trainable_main_grad"] = all(getattr(p, "main_grad", None) is not None for p in params.values() if p.requires_grad)
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return run_ranks(_body, 1)[0]
    return te_gpu.once_per_run("te_fused_gpu", tmp_path_factory.getbasetemp().parent, lambda: run_ranks(_body, 1)[0])


@requires_gpus(1)
@requires_te
def test_fused_preserve_is_bitwise_megatron_cores_te_spec(results: dict) -> None:
    assert results["bitwise_vs_fused_te_spec"], results["max_err_vs_fused_te_spec"]


@requires_gpus(1)
@requires_te
def test_fused_equals_the_modules_composition_in_bf16(results: dict) -> None:
    assert results["logits_err"] < 2e-2 and results["grad_rel_err"] < 5e-2, results


@requires_gpus(1)
@requires_te
def test_fused_layer_nodes_no_more_than_the_dense_te_layer(results: dict) -> None:
    assert results["nodes_fused"] <= results["nodes_dense_te"], results


@requires_gpus(1)
@requires_te
def test_skip_base_grad_keeps_the_trainable_gradients(results: dict) -> None:
    assert results["skip_rel_err"] < 5e-2, results


@requires_gpus(1)
@requires_te
def test_fused_trains_through_megatron_core_with_te_wgrad_fusion(results: dict) -> None:
    assert all(torch.isfinite(torch.tensor(results["losses"])).tolist()), results["losses"]
    assert results["losses"][-1] < results["losses"][0], results["losses"]
    assert results["frozen_ok"] and results["trainable_main_grad"], results

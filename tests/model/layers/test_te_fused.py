"""The one-node TE composition (te_fused.py, te_backend(linear="fused")) on CPU, TE's functional
layer replaced by the stand-in that records its calls (tests/model/_te_standin.py `functional`,
which refuses a non-contiguous operand). How SCALE composes TE's calls, not TE: the real thing is
tests/model/test_te_fused_gpu.py's (marked te).

One spawn of two ranks, at TP 1 (two data-parallel ranks), TP 2 and TP 2 with sequence parallelism:
  1. the model equals the local backend's (fused.py): logits, and every gradient compared by
     checkpoint key (trainable blocks perturbed off their zero init, so every gradient is non-zero);
     the Preserve head bitwise the base model's (built from the same pieces the stand-in computes
     with); the same checkpoint keys; frozen weights without gradient;
  2. TE's calls: every operand contiguous (else the stand-in raises), each base weight in exactly
     one forward GEMM, megatron-core's TE call (layout TN, not accumulating, into a fresh output or
     the start of a fresh buffer, B [tokens, n]), no
     weight-gradient GEMM for it;
  3. skip_base_grad: no dgrad into the base features (no NN GEMM on W or W21, no base norm
     backward) and every trainable gradient equal to the full backward's;
  4. checkpoints interchange with the local backend both ways at TP 2 (digest checked).
In process: the autograd nodes of one layer, gradient-accumulation fusion into main_grad, the
refusals.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks

SETTINGS = ((1, False), (2, False), (2, True))  # (tp, sequence_parallel)


def _fused(model: Any) -> list[Any]:
    from megatron_scale.model.layers.te_fused import _FusedLinear

    return [m for m in model.modules() if isinstance(m, _FusedLinear)]


def _grads_by_key(model: Any) -> dict[str, torch.Tensor]:
    """Every parameter's gradient in checkpoint keys (zero where none): the values swapped for the
    gradients while the global state dict is taken, so both backends' layouts compare."""
    from megatron_scale.model.weights.state import global_state_dict

    params = list(model.parameters())
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p.copy_(p.grad if p.grad is not None else torch.zeros_like(p))
    sd = global_state_dict(model)
    with torch.no_grad():
        for p, v in zip(params, saved, strict=True):
            p.copy_(v)
    return sd


def _rel(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp_min(1e-12)) for k in a)


def _step(model: Any, b: dict) -> torch.Tensor:
    logits = model(b["input_ids"], b["position_ids"], b["attention_mask"])
    logits.float().square().mean().backward()
    return logits.detach()


def _models(tp: int, sp: bool, scale: Any, backend: Any, tied: bool = False) -> tuple[Any, Any]:
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict

    state = _tiny.base_state_dict(tied=tied)
    cfg = _tiny.base_config(tp, sequence_parallel=sp)
    torch.manual_seed(11)
    local = _tiny.build_scale(cfg, scale, tied, state)
    with torch.no_grad():  # off the zero init: every block gets a gradient
        for p in local.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    fused = _tiny.build_scale(cfg, scale, tied, state, backend=backend)
    load_global_state_dict(fused, global_state_dict(local))
    return local, fused


def _compare(tp: int, sp: bool, backend: Any, scale: Any, tag: str) -> tuple[dict[str, Any], Any, Any]:
    """(results, the local model, the fused model), both after one backward of the same batch."""
    from megatron_scale.model.layers.heads import output_head
    from tests.model._te_standin import functional

    res: dict[str, Any] = {}
    b = _tiny.batch(seed=5)
    local, fused = _models(tp, sp, scale, backend)
    if not sp and tag == "preserve":
        state = _tiny.base_state_dict(tied=False)
        base = _tiny.build_base(_tiny.base_config(tp), False, state).eval()
        with torch.no_grad(), output_head(fused, "preserve"):
            ref = base(b["input_ids"], b["position_ids"], b["attention_mask"])
            res["preserve_head_bitwise"] = torch.equal(fused(b["input_ids"], b["position_ids"], b["attention_mask"]), ref)
    z_local = _step(local, b)
    functional.reset()
    z_fused = _step(fused, b)
    calls = list(functional.calls)
    res["logits_err"] = float((z_local - z_fused).abs().max())
    g_local, g_fused = _grads_by_key(local), _grads_by_key(fused)
    res["same_keys"] = sorted(g_local) == sorted(g_fused)
    res["nonzero_trainable"] = sum(1 for n, p in fused.named_parameters() if p.grad is not None and p.grad.abs().max() > 0)
    res["trainable"] = sum(1 for p in fused.parameters() if p.requires_grad)
    res["grad_rel_err"] = _rel(g_local, g_fused)
    linears = _fused(fused)
    res["linears"] = len(linears)
    res["frozen_no_grad"] = all(m.weight.grad is None and not m.weight.requires_grad for m in linears)
    # the base GEMMs: each W in exactly one forward GEMM, megatron-core's TE call, never in a wgrad
    tokens = _tiny.SEQ * _tiny.BATCH
    exact = []
    for m in linears:
        ptr = m.weight.data_ptr()
        fwd = [c for c in calls if c["name"] == "general_gemm" and c["A_ptr"] == ptr and c["layout"] == "TN"]
        fresh = not fwd[0]["accumulate"] and fwd[0]["out_offset"] in (None, 0) if fwd else False  # a buffer's start
        exact.append(len(fwd) == 1 and fresh and fwd[0]["A"] == tuple(m.weight.shape)
                     and fwd[0]["B"] == (tokens, m.weight.shape[1]))
    res["base_gemms_exact"] = all(exact) and len(exact) == 4 * _tiny.LAYERS
    weights = {m.weight.data_ptr() for m in linears}
    res["no_base_wgrad"] = not any(c["name"] == "general_gemm" and c["layout"] == "NT" and c.get("out_ptr") in weights
                                   for c in calls)
    res["calls"] = len(calls)
    return {f"{tag}/{k}": v for k, v in res.items()}, local, fused


def _skip(local: Any, full: Any, backend: Any, scale: Any, tp: int, sp: bool) -> dict[str, Any]:
    """skip_base_grad on every fused linear (the keyword's effect; its plumbing is the layer spec's),
    against `full`, the same model after the full backward of the same batch."""
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict
    from tests.model._te_standin import functional

    skip = _tiny.build_scale(_tiny.base_config(tp, sequence_parallel=sp), scale, False,
                             _tiny.base_state_dict(tied=False), backend=backend)
    load_global_state_dict(skip, global_state_dict(local))
    for m in _fused(skip):
        m._call = replace(m._call, skip=True)
    functional.reset()
    _step(skip, _tiny.batch(seed=5))
    calls = list(functional.calls)
    trainable = {n for n, p in skip.named_parameters() if p.requires_grad}
    g_full = {n: p.grad for n, p in full.named_parameters() if n in trainable}
    g_skip = {n: p.grad for n, p in skip.named_parameters() if n in trainable}
    base = {m.weight.data_ptr() for m in _fused(skip)}
    base |= {m.weight_21.data_ptr() for m in _fused(skip) if not m.whole_up}
    base |= {m.weight_up.data_ptr() for m in _fused(skip) if m.whole_up}
    return {
        "trainable_rel_err": max(float((g_full[k] - g_skip[k]).abs().max() / g_full[k].abs().max()) for k in g_full),
        "all_graded": all(g is not None and g.abs().max() > 0 for g in g_skip.values()),
        "base_dgrads": sum(1 for c in calls if c["name"] == "general_gemm" and c["layout"] == "NN" and c["A_ptr"] in base),
        "norm_bwd": sum(1 for c in calls if c["name"] == "rmsnorm_bwd"),
        "norm_fwd": sum(1 for c in calls if c["name"] == "rmsnorm_fwd"),
    }


def _checkpoints(local: Any, fused: Any, backend: Any, scale: Any, tp: int, ckpt: Path) -> dict[str, float]:
    """A local checkpoint into a fresh fused model, and the fused model's back into a local one."""
    from megatron_scale.checkpoint import load_checkpoint, save_checkpoint
    from megatron_scale.methods import Scale

    b, state = _tiny.batch(seed=6), _tiny.base_state_dict(tied=False)
    fresh = _tiny.build_scale(_tiny.base_config(tp), scale, False, state, backend=backend)
    method = Scale(dims=fused.scale_dims)
    save_checkpoint(local, ckpt / f"local_tp{tp}", method=method)
    load_checkpoint(fresh, ckpt / f"local_tp{tp}", method=method)  # raises on a digest or key mismatch
    save_checkpoint(fused, ckpt / f"fused_tp{tp}", method=method)
    back = _tiny.build_scale(_tiny.base_config(tp), scale, False, state)
    load_checkpoint(back, ckpt / f"fused_tp{tp}", method=method)
    with torch.no_grad():
        z = {name: m(b["input_ids"], b["position_ids"], b["attention_mask"])
             for name, m in (("local", local), ("fresh", fresh), ("fused", fused), ("back", back))}
    return {"loaded_err": float((z["local"] - z["fresh"]).abs().max()), "back_err": float((z["back"] - z["fused"]).abs().max())}


def _body(rank: int, world: int, ckpt: str) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers import te
    from megatron_scale.model.layers.spec import te_backend
    from megatron_scale.scale_config import ScaleConfig
    from tests.model import _te_standin

    te.use_stand_in(_te_standin)
    backend = te_backend(core_attention=mc.DotProductAttention, linear="fused")
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
        res, local, fused = _compare(tp, sp, backend, preserve, "preserve")
        res["skip"] = _skip(local, fused, backend, preserve, tp, sp)
        if tp == 2 and not sp:
            res["ckpt"] = _checkpoints(local, fused, backend, preserve, tp, Path(ckpt))
        out[key] = {**res, **_compare(tp, sp, backend, adapt, "adapt")[0]}
    out["cpu_s"] = time.process_time()
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(_body, 2, str(tmp_path_factory.mktemp("te_fused_ckpt")))


KEYS = [f"tp{tp}{'_sp' if sp else ''}" for tp, sp in SETTINGS]


@pytest.mark.dist
@pytest.mark.parametrize("key", KEYS)
def test_one_node_composition_computes_the_local_model(results: list, key: str) -> None:
    for r in results:
        res = r[key]
        for tag in ("preserve", "adapt"):
            assert res[f"{tag}/linears"] == 4 * _tiny.LAYERS
            if not key.endswith("_sp") and tag == "preserve":
                assert res[f"{tag}/preserve_head_bitwise"], res
            assert res[f"{tag}/logits_err"] < 1e-5, res
            assert res[f"{tag}/same_keys"] and res[f"{tag}/nonzero_trainable"] == res[f"{tag}/trainable"], res
            assert res[f"{tag}/grad_rel_err"] < 1e-5, res
            assert res[f"{tag}/frozen_no_grad"]


@pytest.mark.dist
@pytest.mark.parametrize("key", KEYS)
def test_te_gets_contiguous_operands_and_the_base_gemm_as_megatron_core_calls_it(results: list, key: str) -> None:
    for r in results:
        res = r[key]
        for tag in ("preserve", "adapt"):
            assert res[f"{tag}/calls"] > 0  # every one of them had contiguous operands: the stand-in raises otherwise
            assert res[f"{tag}/base_gemms_exact"], res
            assert res[f"{tag}/no_base_wgrad"]


@pytest.mark.dist
@pytest.mark.parametrize("key", KEYS)
def test_skip_base_grad_drops_the_base_dgrad_and_keeps_every_trainable_gradient(results: list, key: str) -> None:
    for r in results:
        s = r[key]["skip"]
        assert s["all_graded"], s
        assert s["trainable_rel_err"] < 1e-6, s
        assert s["base_dgrads"] == 0, s
        # two halves per layer norm and the final norm's; backward the new halves' only
        assert s["norm_fwd"] == 4 * _tiny.LAYERS + 2 and s["norm_bwd"] == 2 * _tiny.LAYERS + 1, s


@pytest.mark.dist
def test_checkpoints_interchange_with_the_local_backend(results: list) -> None:
    for r in results:
        c = r["tp2"]["ckpt"]
        assert c["loaded_err"] < 1e-5 and c["back_err"] < 1e-5, c


# ---- in process ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_rank() -> Any:
    """A single-rank process group for the in-process checks (the fork server's rank)."""
    return run_ranks(_in_process, 1)[0]


def _nodes(t: torch.Tensor, stop: torch.Tensor) -> list[str]:
    """The autograd nodes behind `t`, not counting the leaves' accumulators."""
    seen, names, todo = set(), [], [t.grad_fn]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        if type(n).__name__ != "AccumulateGrad":
            names.append(type(n).__name__)
        todo += [f for f, _ in n.next_functions]
    return names


def _layer_nodes(model: Any, width: int) -> list[str]:
    layer = model.decoder.layers[0]
    x = torch.randn(_tiny.SEQ, _tiny.BATCH, width, device=_tiny.device(), requires_grad=True)
    from megatron_scale.model.inputs import causal_mask

    out, _ = layer(hidden_states=x, attention_mask=causal_mask(_tiny.SEQ, x.device))
    return _nodes(out, x)


def _in_process(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers import te
    from megatron_scale.model.layers.norm import RMSNorm
    from megatron_scale.model.layers.partition import BlockSplit
    from megatron_scale.model.layers.spec import te_backend
    from megatron_scale.scale_config import ScaleConfig
    from tests.model import _te_standin

    init_distributed(1, 1, device="cpu", seed=1234)
    te.use_stand_in(_te_standin)
    backend = te_backend(core_attention=mc.DotProductAttention, linear="fused")
    out: dict[str, Any] = {}
    state = _tiny.base_state_dict(tied=False)
    cfg = _tiny.base_config(1)
    # the composition's own nodes with the full backward; the skip's (the default) beside them: its
    # attention runs the base heads apart (split_attention.py) and joins them to the new ones
    fused = _tiny.build_scale(cfg, ScaleConfig(variant="preserve", base_backward="full"), False, state, backend=backend)
    skipping = _tiny.build_scale(cfg, ScaleConfig(variant="preserve"), False, state, backend=backend)
    dense = _tiny.build_base(cfg, False, state)
    out["fused_nodes"] = _layer_nodes(fused, fused.config.hidden_size)
    out["skip_nodes"] = _layer_nodes(skipping, skipping.config.hidden_size)
    out["dense_nodes"] = _layer_nodes(dense, _tiny.HIDDEN)
    x = torch.randn(4, _tiny.HIDDEN, device=_tiny.device(), requires_grad=True)
    out["norm_nodes"] = _nodes(RMSNorm(cfg, _tiny.HIDDEN).to(_tiny.device())(x), x)

    # gradient-accumulation fusion: straight into fp32 main_grad, as DDP sets it up
    split = BlockSplit(parallel="column", in_base=64, in_up=16, out_base=128, out_up=32)
    lin = backend.column_linear(80, 160, split=split, config=cfg, init_method=torch.nn.init.normal_,
                                fuse_wgrad_accumulation=True)
    ref = backend.column_linear(80, 160, split=split, config=cfg, init_method=torch.nn.init.normal_)
    ref.load_state_dict(lin.state_dict())
    lin, ref = lin.to(_tiny.device()), ref.to(_tiny.device())
    h = torch.randn(8, 2, 80, device=_tiny.device())  # a planar stream (planar.py): any tensor is one

    def loss(m: Any) -> torch.Tensor:
        y, y_up = m.pair(h)
        return y.square().sum() + y_up.square().sum()

    loss(ref).backward()
    for p in (lin.weight_21, lin.weight_22, lin.layer_norm_weight_up):
        p.main_grad = torch.full(p.shape, 0.5, dtype=torch.float32, device=_tiny.device())
        p.grad_added_to_main_grad = False
    loss(lin).backward()
    out["fused_main_grad"] = all(torch.allclose(getattr(lin, w).main_grad - 0.5, getattr(ref, w).grad, atol=1e-5)
                                 for w in ("weight_21", "weight_22"))
    out["flags_set"] = lin.weight_21.grad_added_to_main_grad and lin.weight_22.grad_added_to_main_grad
    out["norm_gain_unfused"] = torch.allclose(lin.layer_norm_weight_up.grad, ref.layer_norm_weight_up.grad)
    skip = backend.column_linear(80, 160, split=split, config=cfg, init_method=torch.nn.init.normal_, skip_base_grad=True)
    out["skip_keyword"] = skip._call.skip
    for what, kwargs, conf in (("adapt_skip", {"skip_base_grad": True}, cfg), ("fp8", {}, replace(cfg, fp8="hybrid"))):
        try:
            backend.column_linear(80, 160, split=replace(split, adapt=what == "adapt_skip"), config=conf,
                                  init_method=torch.nn.init.normal_, **kwargs)
            out[what] = "built"
        except ValueError as e:
            out[what] = str(e)
    try:
        te_backend(core_attention=mc.DotProductAttention, linear="one")
    except ValueError as e:
        out["bad_linear"] = str(e)
    out["cpu_s"] = time.process_time()
    return out


def test_a_fused_layer_has_no_more_autograd_nodes_than_the_dense_te_layer(one_rank: dict) -> None:
    """The dense TE layer is the dense local layer with its two norms fused into the linears
    (megatron-core's TELayerNormColumnParallelLinear): its node count is the local one's less two
    norms' nodes. The GPU test (test_te_fused_gpu.py) compares against megatron-core's TE layer."""
    fused, dense, norm = one_rank["fused_nodes"], one_rank["dense_nodes"], one_rank["norm_nodes"]
    assert fused.count("_NormColumnBackward") == 2 and fused.count("_RowBackward") == 2, fused
    assert fused.count("_SwiGLUPairBackward") == 1
    # query, key and value each the base and the new heads side by side (ScaleTESelfAttention): the
    # only joins; nothing sliced, the planar stream's halves are views (planar.py)
    assert fused.count("CatBackward0") == 3 and not {"SliceBackward0", "SplitBackward0"} & set(fused), sorted(fused)
    assert len(fused) <= len(dense) - 2 * len(norm), (len(fused), len(dense), len(norm), sorted(fused), sorted(dense))
    # with the skip: the new heads taken apart in one node, one join of the base heads' output to
    # the new heads', and still no more nodes
    skip = one_rank["skip_nodes"]
    assert skip.count("CatBackward0") == 4 and skip.count("_NewHeadsBackward") == 1, sorted(skip)
    assert "SliceBackward0" not in skip and len(skip) <= len(dense) - 2 * len(norm), (len(skip), sorted(skip))


def test_weight_gradients_fuse_into_main_grad(one_rank: dict) -> None:
    assert one_rank["fused_main_grad"] and one_rank["flags_set"] and one_rank["norm_gain_unfused"], one_rank


def test_the_keyword_and_the_refusals(one_rank: dict) -> None:
    assert one_rank["skip_keyword"] is True
    assert "Preserve only" in one_rank["adapt_skip"], one_rank
    assert one_rank["fp8"].startswith("--scale-te-linear fused runs bf16 only"), one_rank
    assert one_rank["bad_linear"].startswith("--scale-te-linear 'one'"), one_rank


def test_the_stand_in_refuses_what_te_would_misread() -> None:
    from tests.model._te_standin import functional

    w = torch.randn(4, 6)
    with pytest.raises(AssertionError, match="non-contiguous B"):
        functional.general_gemm(w, torch.randn(3, 12)[:, :6])
    functional.reset()
    y = functional.general_gemm(w, torch.randn(3, 6))[0]
    assert y.shape == (3, 4) and functional.calls[0]["layout"] == "TN"

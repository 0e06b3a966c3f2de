"""Preservation, frozen-base integrity and what trains, at TP=1 and TP=2 (gloo, 2 ranks).

Compared against megatron-core's own GPTModel (local spec) loaded with the same global base
weights (tests/_tiny.py), same kernels, fp32:
  1. at init, every variant's logits (tied and untied) equal the base logits bitwise;
  2. Preserve, after 20 optimizer steps (megatron DDP + get_megatron_optimizer + schedules):
     the first d dims of every layer's output and the preservation-head logits are bitwise the
     base model's, while the adaptation head has moved;
  3. the bytes of every frozen tensor and the frozen-base digest are unchanged by training;
  4. frozen parameters have no .grad, no main_grad and are in no optimizer group; optimizer state
     holds exactly 2 x (trainable numel) values (Adam's two moments);
  5. Adapt: W12 exists exactly where the adaptation setting says, and receives gradient there;
  6. TP=2 with sequence parallelism (split norms over a sequence-split stream) equals TP=2 without.
One spawn runs every check at TP=1 (two data-parallel replicas), then at TP=2.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks

STEPS = 20
VARIANTS = ("preserve", "adapt", "route")


def _layer_outputs(model: Any) -> tuple[list[torch.Tensor], Any]:
    outs: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(lambda m, i, o: outs.append(o[0] if isinstance(o, tuple) else o))
        for layer in model.decoder.layers
    ]
    return outs, hooks


def _logits(model: Any, b: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(b["input_ids"], b["position_ids"], b["attention_mask"])


def _init_checks(tp: int) -> dict[str, Any]:
    from megatron_scale.scale_config import ScaleConfig

    res: dict[str, Any] = {}
    b = _tiny.batch()
    for tied in (True, False):
        state = _tiny.base_state_dict(tied)
        base = _tiny.build_base(_tiny.base_config(tp), tied, state).eval()
        ref = _logits(base, b)
        for variant in VARIANTS:
            model = _tiny.build_scale(_tiny.base_config(tp), ScaleConfig(variant=variant), tied, state)
            model.train()
            res[f"init/{variant}/tied={tied}/train"] = torch.equal(_logits(model, b), ref)
            res[f"init/{variant}/tied={tied}/eval"] = torch.equal(_logits(model.eval(), b), ref)
    return res


def _train_preserve(tp: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.checkpoint.digest import frozen_base_digest

    res: dict[str, Any] = {}
    state = _tiny.base_state_dict(tied=True)
    cfg = _tiny.base_config(tp)
    base = _tiny.build_base(cfg, True, state).eval()
    model = _tiny.build_scale(cfg, ScaleConfig(variant="preserve", init="svd"), True, state)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainable0 = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    digest0 = frozen_base_digest(model)

    ddp = mc.DistributedDataParallel(
        model.config, mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True), module=model
    )
    opt = mc.get_megatron_optimizer(
        mc.OptimizerConfig(optimizer="adam", lr=1e-2, clip_grad=1.0, params_dtype=torch.float32), [ddp]
    )
    model.config.finalize_model_grads_func = mc.finalize_model_grads
    fwd_bwd = mc.get_forward_backward_func()

    def forward_step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        out = m(x["input_ids"], x["position_ids"], x["attention_mask"], labels=x["labels"])
        return out, lambda o: (o.float().mean(), {"lm loss": o.float().mean().detach()})

    train_batch = _tiny.batch(seed=7)
    losses = []
    for _ in range(STEPS):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        out = fwd_bwd(
            forward_step_func=forward_step, data_iterator=iter([train_batch]), model=[ddp],
            num_microbatches=1, seq_length=_tiny.SEQ, micro_batch_size=_tiny.BATCH, forward_only=False,
        )
        ok, _, _ = opt.step()
        assert ok
        losses.append(float(out[0]["lm loss"]))
    res["loss_first_last"] = (losses[0], losses[-1])

    params = {n: p for n, p in model.named_parameters()}
    res["frozen_bytes_unchanged"] = all(torch.equal(params[n], t) for n, t in frozen.items())
    res["trainable_all_moved"] = all(not torch.equal(params[n], t) for n, t in trainable0.items())
    res["digest_unchanged"] = frozen_base_digest(model) == digest0
    res["frozen_no_grad"] = all(params[n].grad is None for n in frozen)
    res["frozen_no_main_grad"] = all(getattr(params[n], "main_grad", None) is None for n in frozen)
    res["trainable_have_main_grad"] = all(getattr(params[n], "main_grad", None) is not None for n in trainable0)
    torch_opts = [o.optimizer for o in getattr(opt, "chained_optimizers", [opt])]
    in_groups = {id(p) for o in torch_opts for g in o.param_groups for p in g["params"]}
    res["frozen_not_in_optimizer"] = not any(id(params[n]) in in_groups for n in frozen)
    res["trainable_in_optimizer"] = all(id(params[n]) in in_groups for n in trainable0)
    state_numel = sum(
        t.numel() for o in torch_opts for s in o.state.values() for t in s.values()
        if torch.is_tensor(t) and t.dim() > 0
    )
    res["optimizer_state_numel"] = (state_numel, 2 * sum(t.numel() for t in trainable0.values()))

    b = _tiny.batch(seed=3)
    model.eval()
    base_outs, h1 = _layer_outputs(base)
    ref = _logits(base, b)
    scale_outs, h2 = _layer_outputs(model)
    with output_head(model, "preserve"):
        z_p = _logits(model, b)
    for h in h1 + h2:
        h.remove()
    d = _tiny.HIDDEN
    res["layers_checked"] = len(base_outs)
    res["hidden_bitwise"] = [torch.equal(s[..., :d], r) for s, r in zip(scale_outs, base_outs, strict=True)]
    res["hidden_up_nonzero"] = all(bool(s[..., d:].abs().sum() > 0) for s in scale_outs)
    res["preserve_head_bitwise"] = torch.equal(z_p, ref)
    with output_head(model, "adapt"):
        res["adapt_head_moved"] = float((_logits(model, b) - ref).abs().max())
    return res


def _adapt_checks(tp: int) -> dict[str, Any]:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.layers.spec import block_splits

    res: dict[str, Any] = {}
    state = _tiny.base_state_dict(tied=False)
    settings = {
        "default": ScaleConfig(variant="adapt"),
        "custom": ScaleConfig(variant="adapt", adapt_layers=(0, 3), adapt_modules=("fc1", "fc2", "proj")),
        "preserve": ScaleConfig(variant="preserve", adapt_layers=(0, 1, 2, 3)),
    }
    paths = {"qkv": "self_attention.linear_qkv", "proj": "self_attention.linear_proj",
             "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2"}
    for name, sc in settings.items():
        model = _tiny.build_scale(_tiny.base_config(tp), sc, False, state)
        b = _tiny.batch(seed=5)
        model(b["input_ids"], b["position_ids"], b["attention_mask"], labels=b["labels"]).float().mean().backward()
        dims = model.scale_dims
        where, graded, expected = [], [], []
        for layer in model.decoder.layers:
            i = layer.layer_number - 1
            for mod, path in paths.items():
                lin = layer.get_submodule(path)
                if dims.adapts(i, mod):
                    expected.append((i, mod))
                if lin.weight_12 is not None:
                    where.append((i, mod))
                    grad = lin.weight_12.grad
                    if grad is not None and bool(grad.abs().sum() > 0):
                        graded.append((i, mod))
                assert block_splits(dims, i)[mod].adapt == dims.adapts(i, mod)
        res[name] = {"where": sorted(where), "expected": sorted(expected), "graded": sorted(graded)}
    return res


def _sequence_parallel_checks() -> dict[str, Any]:
    """TP=2: the same Adapt model (every block perturbed) with and without sequence parallelism
    gives the same loss and gradients (SP gains' partial grads all-reduced, as
    finalize_model_grads does)."""
    from megatron_scale import _mcore as mc
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict

    state = _tiny.base_state_dict(tied=True)
    sc = ScaleConfig(variant="adapt", adapt_modules=("qkv", "proj", "fc1", "fc2"))
    b = _tiny.batch(seed=9)
    perturbed: dict[str, torch.Tensor] | None = None
    out = {}
    for sp in (False, True):
        model = _tiny.build_scale(_tiny.base_config(2, sequence_parallel=sp), sc, True, state)
        if perturbed is None:
            g = torch.Generator().manual_seed(3)
            full = global_state_dict(model)
            perturbed = {k: v if k in state else v + 0.02 * torch.randn(v.shape, generator=g) for k, v in full.items()}
        load_global_state_dict(model, perturbed)
        loss = model(b["input_ids"], b["position_ids"], b["attention_mask"], labels=b["labels"]).mean()
        loss.backward()
        grads = {}
        for n, p in model.named_parameters():
            if p.grad is not None:
                if getattr(p, "sequence_parallel", False):
                    torch.distributed.all_reduce(p.grad, group=mc.parallel_state.get_tensor_model_parallel_group())
                grads[n] = p.grad
        out[sp] = (float(loss), grads)
    (l0, g0), (l1, g1) = out[False], out[True]
    return {
        "loss": (l0, l1),
        "same_params_graded": sorted(g0) == sorted(g1) and len(g0) > 0,
        "max_grad_err": max(float((g0[k] - g1[k]).abs().max()) for k in g0),
    }


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed

    out: dict[str, Any] = {}
    init_distributed(1, 1, device="cpu", seed=1234)
    for tp in (1, 2):
        if tp != 1:
            mc.parallel_state.destroy_model_parallel()
            mc.parallel_state.initialize_model_parallel(tp)
            mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
        out[tp] = {"init": _init_checks(tp), "train": _train_preserve(tp), "adapt": _adapt_checks(tp)}
    out["sp"] = _sequence_parallel_checks()
    return out


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_ranks(_body, 2)


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_preservation_at_init(results: list, tp: int) -> None:
    for r in results:
        init = r[tp]["init"]
        assert len(init) == 2 * len(VARIANTS) * 2
        assert all(init.values()), {k: v for k, v in init.items() if not v}


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_persistent_preservation_after_training(results: list, tp: int) -> None:
    for r in results:
        t = r[tp]["train"]
        first, last = t["loss_first_last"]
        assert last < first, t["loss_first_last"]
        assert t["layers_checked"] == _tiny.LAYERS
        assert all(t["hidden_bitwise"]), t["hidden_bitwise"]
        assert t["hidden_up_nonzero"]
        assert t["preserve_head_bitwise"]
        assert t["adapt_head_moved"] > 1e-3


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_frozen_base_integrity_and_optimizer(results: list, tp: int) -> None:
    for r in results:
        t = r[tp]["train"]
        for key in ("frozen_bytes_unchanged", "trainable_all_moved", "digest_unchanged", "frozen_no_grad",
                    "frozen_no_main_grad", "trainable_have_main_grad", "frozen_not_in_optimizer",
                    "trainable_in_optimizer"):
            assert t[key], key
        got, want = t["optimizer_state_numel"]
        assert got == want


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_adapt_w12_exactly_where_configured(results: list, tp: int) -> None:
    for r in results:
        a = r[tp]["adapt"]
        assert a["default"]["expected"] == [(i, m) for i in (2, 3) for m in ("proj", "qkv")]
        assert a["custom"]["expected"] == [(i, m) for i in (0, 3) for m in ("fc1", "fc2", "proj")]
        assert a["preserve"]["expected"] == [] and a["preserve"]["where"] == []
        for name in ("default", "custom"):
            assert a[name]["where"] == a[name]["expected"], name
            assert a[name]["graded"] == a[name]["expected"], name


@pytest.mark.dist
def test_sequence_parallel_matches(results: list) -> None:
    for r in results:
        sp = r["sp"]
        assert sp["same_params_graded"]
        assert abs(sp["loss"][0] - sp["loss"][1]) <= 1e-6 * abs(sp["loss"][0])
        assert sp["max_grad_err"] < 1e-6

"""The backward through the frozen base stream, skipped (--scale-base-backward, issue 62), against
the full backward (gloo, 2 ranks, one spawn for every layout).

At TP 1 (two data-parallel replicas), TP 2, TP 2 with sequence parallelism and PP 2 (two
microbatches through megatron-core's 1F1B schedule), for Preserve, Route, the gate and the
Hangul-style rows (every third row of W_out_up), each with every trainable block perturbed so
that every gradient path carries signal from the first step: a model computing the base backward
trains 3 steps through megatron-core's DDP, optimizer and schedule (fp32), and at every step one
that skips it takes its weights and runs the same step. Checked:
  1. every trainable parameter's gradient (DDP's reduced main_grad) equals the full backward's at
     every step, relative to its largest entry, to 1e-6 (bitwise at TP 1 and PP 2 on this CPU;
     at TP 2 the new rows' dgrad GEMMs are narrower and round apart, ~1e-7), the same parameters
     graded, none all zero;
  2. the losses of every step are bitwise equal: the forward is the same computation;
  3. after training the preservation head's per-token losses are bitwise the base model's;
  4. the skip is really on: every layer runs its base heads apart, every upscaled linear and norm
     and the output layer skip; the full model has none of it; both write the same checkpoint
     entries.
At TP 1 also: the GEMM FLOPs torch runs in one step (counted at dispatch) are exactly
model/flops.py's prediction for full fine-tuning, Preserve with the full backward and Preserve
with the skip; the tensors autograd keeps for the backward shrink by at least the base heads'
attention probabilities; Adapt (W12) and Route on Adapt resolve to the full backward and build
none of the skip; a LoRA model has no skip either (its refusal is tests/methods/test_plan.py's).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests import _tiny
from tests._dist import run_ranks

LAYOUTS = (("tp1", 1, 1, False), ("tp2", 2, 1, False), ("tp2_sp", 2, 1, True), ("pp2", 1, 2, False))
CASES = ("preserve", "route", "gate", "rows")
STEPS = 3
MICROBATCHES = 2
aten = torch.ops.aten
GEMMS = (aten.mm, aten.addmm, aten.addmm_, aten.bmm, aten.baddbmm)


def _config(case: str, backward: str) -> Any:
    from megatron_scale.scale_config import ScaleConfig

    extra = {"gate_statistic": "max-prob", "gate_tau": 0.8} if case == "gate" else {}
    return ScaleConfig(variant="route" if case == "route" else "preserve", base_backward=backward, **extra)


def _build(cfg: Any, case: str, backward: str, state: dict) -> Any:
    from megatron_scale.model.layers.heads import output_layers
    from megatron_scale.model.layers.output_rows import scope_output_rows

    model = _tiny.build_scale(cfg, _config(case, backward), False, state)
    g = torch.Generator().manual_seed(21)
    with torch.no_grad():  # every trainable block away from its init: every path carries signal
        for _, p in sorted(model.named_parameters()):
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g).to(p.device))
    if case == "rows":
        scope_output_rows(output_layers(model), torch.arange(_tiny.VOCAB) % 3 == 0)
    return model


def _skip_modules(model: Any) -> dict[str, int]:
    from megatron_scale.model.layers.split_attention import BaseHeadsApart

    mods = list(model.modules())
    return {"apart": sum(isinstance(m, BaseHeadsApart) for m in mods),
            "skipping": sum(bool(getattr(m, "skip_base_grad", False)) for m in mods),
            "with_flag": sum(hasattr(m, "skip_base_grad") for m in mods)}


def _forward_step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
    x = next(data)
    out = m(x["input_ids"], x["position_ids"], x["attention_mask"], labels=x["labels"])
    return out, lambda o: (o.float().mean(), {"per_token": o.detach().clone()})


def _schedule(model: Any, batches: list[dict], forward_only: bool) -> list[torch.Tensor]:
    from megatron_scale import _mcore as mc

    out = mc.get_forward_backward_func()(
        forward_step_func=_forward_step, data_iterator=iter(batches), model=[model], num_microbatches=len(batches),
        seq_length=_tiny.SEQ, micro_batch_size=_tiny.BATCH, forward_only=forward_only,
    )
    return [o["per_token"] for o in out]


def _lockstep(models: dict[str, Any], steps: list[list[dict]]) -> dict[str, tuple[list, list]]:
    """Train the full-backward model; at every step the skipping one first takes its weights, so
    both backwards run on the same weights. Per model and step: the per-token losses (last stage)
    and every trainable main_grad (reduced by DDP)."""
    from megatron_scale import _mcore as mc

    ddp = {k: mc.DistributedDataParallel(m.config, mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True),
                                         module=m) for k, m in models.items()}
    for m in models.values():
        m.config.finalize_model_grads_func = mc.finalize_model_grads
    opt = mc.get_megatron_optimizer(
        mc.OptimizerConfig(optimizer="adam", lr=1e-2, clip_grad=1.0, params_dtype=torch.float32), [ddp["full"]])
    out: dict[str, tuple[list, list]] = {k: ([], []) for k in models}
    for batches in steps:
        with torch.no_grad():
            for (_, p), (_, q) in zip(models["skip"].named_parameters(), models["full"].named_parameters(), strict=True):
                p.copy_(q)
        opt.zero_grad()
        for k, m in models.items():
            ddp[k].zero_grad_buffer()
            out[k][0].append(_schedule(ddp[k], batches, forward_only=False))
            out[k][1].append({n: p.main_grad.detach().clone() for n, p in m.named_parameters() if p.requires_grad})
        ok, _, _ = opt.step()
        assert ok
    return out


def _ckpt_keys(model: Any) -> set[str]:
    return {v.key for v in model.sharded_state_dict().values()}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _compare(cfg: Any, case: str, state: dict, base: Any) -> dict[str, Any]:
    from megatron_scale.model.layers.heads import output_head

    steps = [[_tiny.batch(seed=100 + i) for i in range(MICROBATCHES)]] * STEPS  # the same batches: the loss falls
    models = {backward: _build(cfg, case, backward, state) for backward in ("skip", "full")}
    runs = _lockstep(models, steps)
    (l_skip, g_skip), (l_full, g_full) = runs["skip"], runs["full"]
    res: dict[str, Any] = {
        "modules_skip": _skip_modules(models["skip"]), "modules_full": _skip_modules(models["full"]),
        "n_losses": sum(len(s) for s in l_full),
        "losses_bitwise": all(torch.equal(a, b) for s1, s2 in zip(l_skip, l_full, strict=True)
                              for a, b in zip(s1, s2, strict=True)),
        "same_graded": all(sorted(a) == sorted(b) and len(a) > 0 for a, b in zip(g_skip, g_full, strict=True)),
        "grad_rel": max(_rel(a[k], b[k]) for a, b in zip(g_skip, g_full, strict=True) for k in b),
        "grads_bitwise": all(torch.equal(a[k], b[k]) for a, b in zip(g_skip, g_full, strict=True) for k in b),
        "grads_nonzero": all(bool(b[k].abs().sum() > 0) for b in g_full for k in b),
        "ckpt_keys_equal": _ckpt_keys(models["skip"]) == _ckpt_keys(models["full"]),
    }
    if l_full[0]:
        res["loss_fell"] = float(torch.stack([t.mean() for t in l_full[-1]]).mean()) < float(
            torch.stack([t.mean() for t in l_full[0]]).mean())
    check = [_tiny.batch(seed=7)]
    models["skip"].eval()
    with output_head(models["skip"], "preserve"):
        z_p = _schedule(models["skip"], check, forward_only=True)
    ref = _schedule(base, check, forward_only=True)
    res["preserve_head_bitwise"] = len(z_p) == len(ref) and all(torch.equal(a, b) for a, b in zip(z_p, ref, strict=True))
    return res


class _GemmFlops(TorchDispatchMode):
    """Counts the FLOPs of every matrix product torch runs: 2 x (batch) x M x K x N."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        packet = func._overloadpacket
        if packet in GEMMS:
            a, b = args[:2] if packet in (aten.mm, aten.bmm) else args[1:3]
            self.flops += 2 * a.numel() * b.shape[-1]
        return func(*args, **(kwargs or {}))


def _step_costs(model: Any, b: dict) -> tuple[int, int]:
    """(GEMM FLOPs of one forward + backward, bytes autograd keeps for the backward, weights aside)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    counter = _GemmFlops()
    with counter:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(b["input_ids"], b["position_ids"], b["attention_mask"], labels=b["labels"]).float().mean()
        loss.backward()
    return counter.flops, sum(kept.values())


def _tp1_checks(state: dict) -> dict[str, Any]:
    from megatron_scale.methods import Lora
    from megatron_scale.model import flops
    from megatron_scale.model.build import build_model
    from megatron_scale.model.layers.lora import LoraSettings
    from megatron_scale.scale_config import ScaleConfig

    cfg = _tiny.base_config(1)
    b = _tiny.batch(seed=3)
    res: dict[str, Any] = {}
    preserve = {bw: _tiny.build_scale(cfg, _config("preserve", bw), False, state) for bw in ("skip", "full")}
    d = preserve["skip"].scale_dims
    shape = flops.Shape(hidden=d.hidden, heads=d.heads, groups=d.groups, head_dim=d.head_dim, ffn=d.ffn,
                        hidden_up=d.hidden_up, heads_up=d.heads_up, groups_up=d.groups_up, ffn_up=d.ffn_up)
    tokens = _tiny.BATCH * _tiny.SEQ

    def predicted(method: str, skip: bool = False) -> int:
        return tokens * flops.model_flops(method, shape, _tiny.SEQ, _tiny.LAYERS, _tiny.VOCAB, skip_base_backward=skip)

    full_ft = _tiny.build_base(cfg, False, state)
    res["flops"] = {"full_ft": (_step_costs(full_ft, b)[0], predicted("full_ft"))}
    for bw, model in preserve.items():
        counted, kept = _step_costs(model, b)
        res["flops"][f"preserve_{bw}"] = (counted, predicted("preserve", bw == "skip"))
        res[f"kept_bytes_{bw}"] = kept
    # the base heads' attention probabilities, [b, h, s, s] fp32, per layer: kept no longer
    res["base_probs_bytes"] = _tiny.LAYERS * _tiny.BATCH * d.heads * _tiny.SEQ * _tiny.SEQ * 4
    for name, sc in (("adapt", ScaleConfig(variant="adapt")),
                     ("route_adapt", ScaleConfig(variant="route", route_adapt=True))):
        model = _tiny.build_scale(cfg, sc, False, state)
        res[name] = (model.scale_dims.training.base_backward, _skip_modules(model))
    lora = build_model(_tiny.args(False), Lora(settings=LoraSettings(rank=2, alpha=4.0, dropout=0.0, seed=1)),
                       _tiny.layout(cfg), _tiny.KERNELS)
    res["lora"] = _skip_modules(lora)
    return res


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed

    init_distributed(1, 1, device="cpu", seed=1234)
    state = _tiny.base_state_dict(tied=False)
    out: dict[str, Any] = {}
    for name, tp, pp, sp in LAYOUTS:
        if (tp, pp) != (1, 1):
            mc.parallel_state.destroy_model_parallel()
            mc.parallel_state.initialize_model_parallel(tp, pp)
            mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
        extra = {"pipeline_dtype": torch.float32} if pp > 1 else {}
        cfg = _tiny.base_config(tp, pp, sequence_parallel=sp, **extra)
        base = _tiny.build_base(cfg, False, state).eval()
        out[name] = {case: _compare(cfg, case, state, base) for case in CASES}
        if name == "tp1":
            out["tp1_checks"] = _tp1_checks(state)
    return out


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_ranks(_body, 2)


@pytest.mark.dist
@pytest.mark.parametrize("layout", [name for name, *_ in LAYOUTS])
def test_the_skip_gives_every_trainable_gradient_of_the_full_backward(results: list, layout: str) -> None:
    pp = layout == "pp2"
    for rank, r in enumerate(results):
        for case in CASES:
            res = r[layout][case]
            where = (layout, case, rank)
            layers = _tiny.LAYERS // 2 if pp else _tiny.LAYERS
            last = not pp or rank == 1
            # per layer: 4 linears + 2 norms; + the final norm and the output layer on the last stage
            skipping = 6 * layers + (2 if last else 0)
            assert res["modules_skip"] == {"apart": layers, "skipping": skipping, "with_flag": skipping}, where
            assert res["modules_full"] == {"apart": 0, "skipping": 0, "with_flag": skipping}, where
            assert res["same_graded"] and res["grads_nonzero"], where
            assert res["ckpt_keys_equal"], where
            assert res["grad_rel"] <= 1e-6, (where, res["grad_rel"])
            assert res["n_losses"] == (STEPS * MICROBATCHES if last else 0), where
            if last:
                assert res["losses_bitwise"], where
                assert res["loss_fell"], where
            assert res["preserve_head_bitwise"], where


@pytest.mark.dist
def test_flop_model_counts_the_gemms_and_the_base_keeps_less(results: list) -> None:
    for r in results:
        c = r["tp1_checks"]
        for method, (counted, predicted) in c["flops"].items():
            assert counted == predicted, (method, counted, predicted)
        assert c["flops"]["preserve_skip"][0] < 0.7 * c["flops"]["preserve_full"][0]
        assert c["kept_bytes_full"] - c["kept_bytes_skip"] >= c["base_probs_bytes"], c


@pytest.mark.dist
def test_adapt_and_lora_keep_the_full_backward(results: list) -> None:
    for r in results:
        c = r["tp1_checks"]
        for name in ("adapt", "route_adapt"):
            backward, modules = c[name]
            assert backward == "full" and modules["apart"] == 0 and modules["skipping"] == 0, (name, c[name])
            assert modules["with_flag"] == 6 * _tiny.LAYERS + 2
        assert c["lora"] == {"apart": 0, "skipping": 0, "with_flag": 0}

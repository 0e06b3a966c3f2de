"""The training entry's kernel settings (issue 64): megatron-core's fusions, whole-iteration CUDA
graphs, and the TFLOP/s and MFU it logs. One rank, in process (a fork of the launch server):

- the log's tflops_per_gpu / mfu (and their causal twins) equal the FLOP model's FLOPs x tokens /
  step time / GPUs (/ --peak-tflops), read back from metrics.jsonl of a real two-step run;
- the FLOPs of a SCALE geometry are flops.py's Preserve / Adapt counts, causal attention halved;
- the fusion flags set megatron-core's config fields, and the fused SwiGLU and cross-entropy equal
  the unfused ones on the CPU (loss and every gradient; dense and SCALE's interleaved fc1), run
  eagerly (torch.compiler's force_eager: megatron-core's jit_fuser is torch.compile); the fused
  cross-entropy's gradients to bf16 rounding, as megatron-core returns its logits' gradient in bf16;
- --cuda-graph-impl full_iteration wires megatron-core's FullCudaGraphWrapper around the schedule:
  a stand-in forward_backward_func, called through the real wrapper (its CUDA staging buffers
  swapped for host ones), gets _schedule's keyword arguments and the microbatches;
- each setting that cannot run here is refused by name before any work (CPU, no TE).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from megatron_scale.testing.runs import MODEL, make_dataset
from tests._dist import run_ranks

pytestmark = pytest.mark.dist


def _entry_run(data: str, metrics: Path) -> dict[str, Any]:
    from megatron_scale.training.config import parse
    from megatron_scale.training.loop import train

    argv = [*MODEL, "--method", "full", "--train-iters", "3", "--data-path", data, "--split", "100,0,0",
            "--metrics-file", str(metrics), "--peak-tflops", "0.5"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        run = train(parse(argv))
    recs = [r for r in map(json.loads, metrics.read_text().splitlines()) if r["kind"] == "train"]
    s = run.config.schedule
    return {"records": recs, "flops": (run.flops.full, run.flops.causal), "tokens": s.global_batch_size * s.seq_length,
            "line": [ln for ln in out.getvalue().splitlines() if ln.startswith(" iteration")][-1],
            "config": run.model.config}


def _fusions_equal() -> dict[str, float]:
    """Loss per token and every gradient with and without the SwiGLU and cross-entropy fusions."""
    import torch

    from megatron_scale.model.args import Fusions
    from megatron_scale.model.build import build_model
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.methods import Full, Scale
    from tests import _tiny

    out: dict[str, float] = {}
    b = _tiny.batch(seed=3)
    labels = torch.roll(b["input_ids"], -1, dims=1)
    for name, method in (("full", Full()), ("preserve", Scale.of(ScaleConfig(variant="preserve", init="normal"), _tiny.ARGS))):
        results = []
        for fusions in (Fusions(), Fusions(swiglu=True), Fusions(cross_entropy=True)):
            torch.manual_seed(0)
            kernels = _tiny.KERNELS.__class__(**{**_tiny.KERNELS.__dict__, "fusions": fusions})
            model = build_model(_tiny.ARGS, method, _tiny.layout(_tiny.base_config(1)), kernels).to(_tiny.device())
            if results:
                load_global_state_dict(model, results[0][2])
            else:  # off the zero init of SCALE's new blocks: every gradient non-zero
                with torch.no_grad():
                    for p in model.parameters():
                        if p.requires_grad:
                            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(p.device))
                state = global_state_dict(model)
            out[f"{name}_fields_{len(results)}"] = float(model.config.bias_activation_fusion) + 2 * float(
                model.config.cross_entropy_loss_fusion)
            with torch.compiler.set_stance("force_eager"):
                loss = model(b["input_ids"], b["position_ids"], b["attention_mask"], labels=labels)
                loss.float().mean().backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            results.append((loss.detach(), grads, state))
        (l0, g0, _) = results[0]
        for fused, (l1, g1, _) in zip(("swiglu", "ce"), results[1:], strict=True):
            out[f"{name}_{fused}_loss"] = float((l0 - l1).abs().max())
            out[f"{name}_{fused}_grads"] = max(float((g0[k] - g1[k]).abs().max() / g0[k].abs().max().clamp_min(1e-12))
                                               for k in g0)
            out[f"{name}_{fused}_graded"] = float(sorted(g0) == sorted(g1) and len(g0) > 0
                                                  and all(g.abs().max() > 0 for g in g0.values()))
    return out


def _graph_wiring() -> dict[str, Any]:
    """The real FullCudaGraphWrapper around a recording forward_backward_func."""
    from megatron_scale import _mcore as mc
    from megatron_scale.training import graphs, loop

    calls: list[dict[str, Any]] = []

    def recorder(**kwargs: Any) -> list[dict]:
        batches = list(kwargs["data_iterator"][0])
        calls.append({**{k: v for k, v in kwargs.items() if k != "data_iterator"}, "batches": batches,
                      "data_iterator_is_list": isinstance(kwargs["data_iterator"], list)})
        return [{"lm loss": b["x"].sum()} for b in batches]

    class HostBuffers:  # StaticBufferLoader without its CUDA stream: the batch as it comes
        def __call__(self, inputs: Any, stage: str, microbatch: int) -> Any:
            return inputs

    wrapper_globals = mc.FullCudaGraphWrapper.__init__.__globals__
    saved_loader, saved_get = wrapper_globals["StaticBufferLoader"], mc.get_forward_backward_func
    wrapper_globals["StaticBufferLoader"], mc.get_forward_backward_func = HostBuffers, lambda: recorder
    try:
        import torch

        schedule = SimpleNamespace(cuda_graph_impl="full_iteration", cuda_graph_warmup_steps=5, seq_length=16,
                                   micro_batch_size=2)
        func = graphs.forward_backward_func(schedule)
        run = SimpleNamespace(config=SimpleNamespace(schedule=schedule), ddp="the ddp", num_microbatches=3,
                              forward_backward=func)
        out = loop._schedule(run, iter([{"x": torch.full((2,), float(i))} for i in range(3)]), forward_only=False)
        eager = graphs.forward_backward_func(SimpleNamespace(cuda_graph_impl="none", cuda_graph_warmup_steps=3))
        return {"wrapped": type(func).__name__, "warmup": func.cuda_graph_warmup_steps, "calls": calls,
                "losses": [float(o["lm loss"]) for o in out], "eager_is_recorder": eager is recorder,
                "iteration": mc.FullCudaGraphWrapper.curr_iteration["training"]}
    finally:
        wrapper_globals["StaticBufferLoader"], mc.get_forward_backward_func = saved_loader, saved_get
        mc.FullCudaGraphWrapper.curr_iteration["training"] = 0


def _refusals(data: str) -> dict[str, str]:
    from megatron_scale.training.config import check_kernels, parse
    from megatron_scale.training.plan import FlagError, plan

    base = [*MODEL, "--method", "full", "--train-iters", "3", "--data-path", data]
    cases = {
        "graphs_cpu": ["--cuda-graph-impl", "full_iteration"],
        "te_linear_local": ["--scale-te-linear", "fused"],
        "ce_te": ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"],
        "rope_cpu": ["--apply-rope-fusion"],
        "swiglu_cpu": ["--bias-swiglu-fusion"],
        "peak": ["--peak-tflops", "0"],
        "warmup": ["--cuda-graph-warmup-steps", "-1"],
    }
    out = {}
    for name, extra in cases.items():
        try:
            plan(parse([*base, *extra]), 1)
            out[name] = "planned"
        except FlagError as e:
            out[name] = str(e)
    cfg = parse([*base, "--scale-te-linear", "fused", "--fp8-format", "hybrid", "--bf16"])
    try:
        check_kernels(cfg, te=True)
    except ValueError as e:
        out["fused_fp8"] = str(e)
    try:
        check_kernels(parse([*base, "--scale-local-linear", "planar"]), te=True)
    except ValueError as e:
        out["planar_te"] = str(e)
    cfg = parse([*base, "--cuda-graph-impl", "full_iteration", "--fp8-format", "hybrid", "--cuda-graph-warmup-steps",
                 "1", "--device", "cuda"])
    try:
        check_kernels(cfg, te=True)
    except ValueError as e:
        out["fp8_warmup"] = str(e)
    return out


def _body(rank: int, world: int, root: str) -> dict[str, Any]:
    import dataclasses

    from megatron_scale.methods import Scale
    from megatron_scale.model.args import Fusions
    from megatron_scale.model.flops import Shape, attention, model_flops
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.training.throughput import step_flops
    from tests import _tiny

    data = make_dataset(Path(root) / "data", seed=0, docs=40)
    out: dict[str, Any] = {"entry": _entry_run(data, Path(root) / "metrics.jsonl")}
    cfg = _tiny.base_config(1)
    out["config_fields"] = {k: getattr(_tiny.ARGS.transformer_config(fusions=Fusions(rope=False, swiglu=True,
                            cross_entropy=True), cuda_graph_impl="full_iteration"), k)
                            for k in ("bias_activation_fusion", "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
                                      "apply_rope_fusion", "cuda_graph_impl")}
    for variant, modules in (("preserve", ()), ("adapt", ("qkv", "proj"))):
        dims = ScaleConfig(variant=variant, adapt_layers=(2, 3) if modules else None).resolve(cfg, 1)
        got = step_flops(dims.widened(cfg), 96, 16, Scale(dims=dims))
        shape = Shape(hidden=dims.hidden, heads=dims.heads, groups=dims.groups, head_dim=dims.head_dim, ffn=dims.ffn,
                      hidden_up=dims.hidden_up, heads_up=dims.heads_up, groups_up=dims.groups_up, ffn_up=dims.ffn_up)
        want = model_flops(variant, shape, 16, 4, 96, adapt_layers=2, adapt_modules=modules or ("qkv", "proj"))
        half = 4 * attention(16, dims.heads + dims.heads_up, dims.head_dim) / 2
        out[f"flops_{variant}"] = (got.full, got.causal, float(want), float(want - half))
    out["fusions"] = _fusions_equal()
    out["graphs"] = _graph_wiring()
    out["refusals"] = _refusals(data)
    del dataclasses
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_ranks(_body, 1, str(tmp_path_factory.mktemp("kernels")))[0]


def test_logged_tflops_and_mfu_are_flops_times_tokens_over_step_time(results: dict) -> None:
    e = results["entry"]
    full, causal = e["flops"]
    assert causal < full and len(e["records"]) == 3
    for r in e["records"]:
        for suffix, per_token in (("", full), ("_causal", causal)):
            want = per_token * e["tokens"] / r["step_time"] / 1 / 1e12
            assert r[f"tflops_per_gpu{suffix}"] == pytest.approx(want, rel=1e-12)
            assert r[f"mfu{suffix}"] == pytest.approx(want / 0.5, rel=1e-12)
    assert "throughput per GPU (TFLOP/s/GPU): " in e["line"] and "| MFU: " in e["line"] and "(causal " in e["line"]


def test_scale_flops_are_the_flop_models(results: dict) -> None:
    for variant in ("preserve", "adapt"):
        got_full, got_causal, want_full, want_causal = results[f"flops_{variant}"]
        assert got_full == want_full and got_causal == want_causal, variant


def test_fusion_flags_set_the_config_and_compute_the_same(results: dict) -> None:
    assert results["config_fields"] == {"bias_activation_fusion": True, "cross_entropy_loss_fusion": True,
                                        "cross_entropy_fusion_impl": "native", "apply_rope_fusion": False,
                                        "cuda_graph_impl": "full_iteration"}
    f = results["fusions"]
    for name in ("full", "preserve"):
        assert (f[f"{name}_fields_0"], f[f"{name}_fields_1"], f[f"{name}_fields_2"]) == (0.0, 1.0, 2.0), f
        assert f[f"{name}_swiglu_graded"] == 1.0 and f[f"{name}_ce_graded"] == 1.0
        assert f[f"{name}_swiglu_loss"] < 1e-6 and f[f"{name}_swiglu_grads"] < 1e-5, f
        # megatron-core's fused cross-entropy hands back the logits' gradient in bf16
        # (fusions/fused_cross_entropy.py calculate_gradients): fp32 gradients agree to bf16 rounding
        assert f[f"{name}_ce_loss"] < 1e-6 and 1e-5 < f[f"{name}_ce_grads"] < 2e-2, f


def test_full_iteration_wraps_the_schedule_in_megatron_cores_graph_wrapper(results: dict) -> None:
    g = results["graphs"]
    assert g["wrapped"] == "FullCudaGraphWrapper" and g["warmup"] == 5 and g["eager_is_recorder"]
    (call,) = g["calls"]
    assert call["data_iterator_is_list"] and [float(b["x"][0]) for b in call["batches"]] == [0.0, 1.0, 2.0]
    assert call["model"] == ["the ddp"] and call["num_microbatches"] == 3 and call["forward_only"] is False
    assert call["seq_length"] == 16 and call["micro_batch_size"] == 2 and call["forward_step_func"].__name__ == "_forward_step"
    assert g["losses"] == [0.0, 2.0, 4.0] and g["iteration"] == 1


def test_what_cannot_run_here_is_refused_by_name(results: dict) -> None:
    r = results["refusals"]
    assert "--cuda-graph-impl full_iteration captures CUDA graphs: it needs --device cuda" in r["graphs_cpu"], r
    assert "--scale-te-linear fused needs --transformer-impl transformer_engine" in r["te_linear_local"], r
    assert "--cross-entropy-fusion-impl te: Transformer Engine's cross-entropy fusion is disabled" in r["ce_te"], r
    assert "--apply-rope-fusion runs Transformer Engine's fused RoPE kernel: it needs --device cuda" in r["rope_cpu"], r
    assert "--peak-tflops 0.0: must be > 0" in r["peak"], r
    assert "--bias-swiglu-fusion: megatron-core compiles its fused kernel with torch.compile" in r["swiglu_cpu"], r
    assert "--cuda-graph-warmup-steps" in r["warmup"], r
    assert r["fused_fp8"].startswith("--scale-te-linear fused runs bf16 only"), r
    assert r["planar_te"].startswith("--scale-local-linear planar needs --transformer-impl local"), r
    assert r["fp8_warmup"].startswith("--cuda-graph-warmup-steps 1 with --fp8-format"), r

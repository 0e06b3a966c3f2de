"""tools/bench_scale.py's options for the training entry's conditions (issue 64): --optimizer
megatron (training/optim.py's optimizer over megatron-core's DDP, the same code), --microbatches
(gradient accumulation), --fusions, --scale-te-linear, --cuda-graph, and the JSON's host and device
time and MFU by both attention conventions. In one forked rank, the timing worker itself (no
subprocess); the refusals through main(), before any work."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._dist import run_ranks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_scale  # noqa: E402

TINY = ["--hidden", "64", "--heads", "8", "--groups", "4", "--ffn", "128", "--layers", "2", "--vocab", "256",
        "--seq", "16", "--warmup", "1", "--repeats", "2", "--scopes", "model"]


def _args(*extra: str) -> argparse.Namespace:
    """bench_scale's parsed flags, as main() parses them (its parser, via a SystemExit-free path)."""
    got: dict[str, Any] = {}
    real = bench_scale._check_flags
    bench_scale._check_flags = lambda ap, a: got.setdefault("a", a) and sys.exit(0)  # type: ignore[assignment]
    try:
        with pytest.raises(SystemExit):
            bench_scale.main([*TINY, *extra])
    finally:
        bench_scale._check_flags = real
    a = got["a"]
    a.isolate, a.scope = False, "model"
    return a


def _grads(a: argparse.Namespace, method: str) -> Any:
    """The gradient one step accumulates (the optimizer's update held back), by parameter."""
    import torch

    module, loss_fn, params, opt = bench_scale._setup(a, "model", method)
    step = opt.step
    opt.step = lambda: None
    bench_scale._work(a, loss_fn, opt)
    opt.step = step
    return [(p.main_grad if hasattr(p, "main_grad") else p.grad).detach().clone() for p in params], torch


def _body(rank: int, world: int, args: dict[str, argparse.Namespace]) -> dict[str, Any]:
    rows = bench_scale._time_worker(args["three_megatron"], ["full_ft", "preserve"])  # starts the process group
    out: dict[str, Any] = {"rows": [{k: r[k] for k in ("method", "tokens", "host_s", "device_s", "step_s",
                                                       "optimizer_bytes", "grad_bytes", "trainable")} for r in rows]}
    for a in args.values():
        a.run_device = args["three_megatron"].run_device
    for name in ("adamw", "megatron"):
        one, _ = _grads(args["one"] if name == "adamw" else args["one_megatron"], "full_ft")
        three, torch = _grads(args["three"] if name == "adamw" else args["three_megatron"], "full_ft")
        out[f"{name}_summed"] = max(float((3 * g1 - g3).abs().max() / g1.abs().max().clamp_min(1e-12))
                                    for g1, g3 in zip(one, three, strict=True))
        out[f"{name}_nonzero"] = all(float(g.abs().max()) > 0 for g in one)
    return out


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    args = {"one": _args(), "three": _args("--microbatches", "3"),
            "one_megatron": _args("--optimizer", "megatron", "--bf16"),
            "three_megatron": _args("--optimizer", "megatron", "--bf16", "--microbatches", "3")}
    return run_ranks(_body, 1, args)[0]


def test_microbatches_accumulate_the_summed_gradient_and_count_their_tokens(results: dict) -> None:
    for name in ("adamw", "megatron"):
        assert results[f"{name}_nonzero"], results
        assert results[f"{name}_summed"] < 1e-2 if name == "megatron" else results[f"{name}_summed"] < 1e-5, results
    for r in results["rows"]:
        assert r["tokens"] == 3 * 1 * 16, r  # microbatches x batch x sequence


def test_the_megatron_optimizer_holds_the_training_entrys_state(results: dict) -> None:
    """bf16 parameters: fp32 main copies (4 B), Adam's two moments (8 B), DDP's fp32 main_grad (4 B)."""
    for r in results["rows"]:
        assert (r["optimizer_bytes"] + r["grad_bytes"]) / r["trainable"] >= 16, r
        assert r["grad_bytes"] == 4 * r["trainable"], r


def test_host_and_device_time_apart(results: dict) -> None:
    for r in results["rows"]:
        assert 0 < r["host_s"] <= r["step_s"] and r["device_s"] is None, r  # no CUDA events on the CPU


def test_the_causal_mfu_counts_attention_half() -> None:
    a = _args("--peak-tflops", "1", "--methods", "preserve")
    r = {"tokens": 16, "step_s": 1.0}
    for method in ("full_ft", "preserve"):
        full, causal = bench_scale.mfu(a, "model", method, r), bench_scale.mfu(a, "model", method, r, causal=True)
        shape = bench_scale._shape(a)
        heads = shape.heads + (shape.heads_up if method == "preserve" else 0)
        from megatron_scale.model.flops import attention

        assert full - causal == pytest.approx(2 * attention(16, heads, shape.head_dim) / 2 * 16 / 1e12), method


@pytest.mark.parametrize(("flags", "message"), [
    (["--cuda-graph", "step"], "--cuda-graph step captures a CUDA graph: it needs --device cuda"),
    (["--fusions", "swiglu,ce"], "--fusions swiglu,ce: megatron-core compiles its fused kernels with torch.compile"),
    (["--fusions", "gelu"], "--fusions gelu: choose from rope,swiglu,ce"),
    (["--scale-te-linear", "fused"], "--scale-te-linear fused needs --transformer-impl transformer_engine"),
    (["--transformer-impl", "transformer_engine", "--scale-local-linear", "planar"],
     "--scale-local-linear planar needs --transformer-impl local"),
    (["--microbatches", "0"], "--microbatches 0: must be >= 1"),
    (["--device", "cuda", "--cuda-graph", "step", "--optimizer", "megatron"],
     "--cuda-graph step with --optimizer megatron: megatron-core's optimizer step reads the gradient norm"),
])
def test_what_cannot_run_is_refused_by_name(flags: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        bench_scale.main([*TINY, *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err

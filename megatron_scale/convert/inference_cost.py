"""What serving an export costs: transformers `generate()` throughput and per-token latency beside
the FLOPs the model multiplies per token, for the base model's export, the SCALE export and the
fused view (tools/bench_inference.py prints the table and writes the JSON).

Per model (a Hugging Face folder, loaded as a user loads it, trust_remote_code for SCALE's):

    matmul FLOPs / token   2 x the weights multiplied per generated token (every linear block that
                           exists, the LM head the emitted head needs: W_out for z_p, W_out and
                           W_out_up for z_a and route; an embedding lookup multiplies nothing),
                           plus attention, 4 x (h + h') x k per layer per token of context, at the
                           mean context of the timed generation. A zero block of the fused view
                           (Preserve's W12) is multiplied and counts; the SCALE export skips it.
    prefill ms             generate(max_new_tokens=1): the prompt's forward and one token
    per-token ms           (t(new) - t(1)) / (new - 1): one cached decoding step
    tokens/s               batch x new / t(new), the whole call

Each time is the median of `repeats` calls after one untimed warm-up call, greedy with
min_new_tokens = max_new_tokens (every call generates the same number of tokens), under
torch.inference_mode, synchronised on CUDA. The FLOP ratio and the time ratios are against the
first model given. Numbers measured on a busy machine mean little: time on a quiet one.
"""

from __future__ import annotations

import dataclasses
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from megatron_scale.convert.hf_modeling.routing_scale_llama import output_head


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The generation every model is timed on."""

    batch: int = 1
    """Prompts per generate() call."""
    prompt: int = 128
    """Prompt tokens (random ids, the same for every model)."""
    new: int = 64
    """Tokens generated per call (min = max: no early end)."""
    repeats: int = 5
    """Timed calls per model (after one warm-up); the median is reported."""
    cache: str = "dynamic"
    """KV cache: dynamic, or static (transformers' StaticCache; compiles on CUDA)."""
    seed: int = 0
    """Seed of the prompt ids."""


def _head(model: Any) -> str:
    """The head a model emits: the SCALE export's (config), the fused view's z_a, a Llama's lm_head."""
    config = model.config
    if hasattr(config, "scale_hidden_up"):
        return output_head(config)
    return "adapt" if getattr(config, "scale_norm_split", 0) else "lm_head"


def weights_per_token(model: nn.Module) -> int:
    """Weights multiplied per generated token (see the module docstring)."""
    head = _head(model)
    total = 0
    for module in model.modules():
        cls = type(module).__name__
        if isinstance(module, nn.Linear):
            total += module.weight.numel()
        elif cls == "ScaleLinear":
            total += sum(p.numel() for p in (module.weight, module.weight_12, module.weight_21, module.weight_22)
                         if p is not None)
        elif cls == "ScaleOutputLayer":
            base = module.weight if module.weight is not None else model.get_input_embeddings().weight
            total += base.numel() + (0 if head == "preserve" else module.weight_up.numel())
    return total


def attention_flops_per_token(model: nn.Module, context: float) -> float:
    c = model.config
    heads = c.num_attention_heads + getattr(c, "scale_heads_up", 0)
    return 4.0 * heads * c.head_dim * context * c.num_hidden_layers


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(model: Any, ids: torch.Tensor, new: int, shape: Shape) -> float:
    kw: dict[str, Any] = {"cache_implementation": "static"} if shape.cache == "static" else {}
    _sync(ids.device)
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, pad_token_id=0, **kw)
    _sync(ids.device)
    if out.shape[1] != ids.shape[1] + new:
        raise RuntimeError(f"generate() gave {out.shape[1] - ids.shape[1]} tokens, not {new}")
    return time.perf_counter() - start


def measure(model: Any, shape: Shape, device: torch.device) -> dict[str, Any]:
    """One model's row (FLOPs and times; the ratios are filled by `table`)."""
    if shape.new < 2:
        raise ValueError(f"--new-tokens {shape.new}: at least 2 (the per-token latency is t(new) - t(1))")
    gen = torch.Generator().manual_seed(shape.seed)
    vocab = model.config.vocab_size
    ids = torch.randint(1, vocab, (shape.batch, shape.prompt), generator=gen).to(device)
    with torch.inference_mode():
        _timed(model, ids, shape.new, shape)  # warm-up: allocations, kernels, compiles
        one = statistics.median(_timed(model, ids, 1, shape) for _ in range(shape.repeats))
        full = statistics.median(_timed(model, ids, shape.new, shape) for _ in range(shape.repeats))
    context = shape.prompt + (shape.new - 1) / 2
    flops = 2.0 * weights_per_token(model) + attention_flops_per_token(model, context)
    return {
        "architecture": type(model).__name__, "head": _head(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "matmul_gflops_per_token": flops / 1e9, "prefill_ms": 1e3 * one,
        "per_token_ms": 1e3 * (full - one) / (shape.new - 1), "tokens_per_s": shape.batch * shape.new / full,
    }


def load(folder: str | Path, dtype: torch.dtype, device: torch.device) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=True)
    return model.to(device).eval()


def run(models: Sequence[tuple[str, str | Path]], shape: Shape, dtype: torch.dtype,
        device: torch.device) -> dict[str, Any]:
    """Every (label, folder) measured, in order, one at a time; ratios against the first."""
    import transformers

    rows = []
    for label, folder in models:
        model = load(folder, dtype, device)
        rows.append({"label": label, "folder": str(folder), **measure(model, shape, device)})
        del model
    first = rows[0]
    for r in rows:
        r["flop_ratio"] = r["matmul_gflops_per_token"] / first["matmul_gflops_per_token"]
        r["latency_ratio"] = r["per_token_ms"] / first["per_token_ms"] if first["per_token_ms"] > 0 else None
        r["throughput_ratio"] = r["tokens_per_s"] / first["tokens_per_s"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {
        "shape": dataclasses.asdict(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "device": {"type": device.type, "name": name, "threads": torch.get_num_threads()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    """The rows as a Markdown table."""
    head = ("| model | head | GFLOPs/token | FLOP ratio | prefill ms | per-token ms | latency ratio | tokens/s | "
            "throughput ratio |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in result["rows"]:
        lat = "-" if r["latency_ratio"] is None else f"{r['latency_ratio']:.2f}x"
        lines.append(f"| {r['label']} | {r['head']} | {r['matmul_gflops_per_token']:.4g} | {r['flop_ratio']:.2f}x | "
                     f"{r['prefill_ms']:.1f} | {r['per_token_ms']:.2f} | {lat} | {r['tokens_per_s']:.1f} | "
                     f"{r['throughput_ratio']:.2f}x |")
    s = result["shape"]
    lines.append(f"\n{result['device']['type']} ({result['device']['name']}, {result['device']['threads']} threads), "
                 f"{result['dtype']}, batch {s['batch']}, prompt {s['prompt']}, {s['new']} new tokens, "
                 f"{s['cache']} cache, median of {s['repeats']}")
    return "\n".join(lines)

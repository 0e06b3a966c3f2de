"""TFLOP/s per GPU and MFU of a training step, as Megatron-LM logs them.

    tflops_per_gpu = FLOPs per token x tokens per step / step time / GPUs / 1e12
    mfu            = tflops_per_gpu / --peak-tflops

FLOPs per token are the FLOP model's (model/flops.py: the GEMMs, forward and backward) of the
model the run trains: for a SCALE model its geometry (ScaleDims: the frozen blocks without weight
gradient, W12 where Adapt has it); for the dense methods (full, freeze, LoRA, LLaMA-Pro at its grown
depth) every GEMM trained, Megatron-LM's convention (frozen layers still counted). Two attention
conventions, both logged:
    full    QK^T and AV over the whole s x s (flops.py, bench_scale's MFU; NVIDIA's DGX Cloud numbers)
    causal  that attention term halved, as Megatron-LM counts causal attention (`_causal` fields)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megatron_scale.model import flops

TIMED_FIELDS = ("tflops_per_gpu", "tflops_per_gpu_causal", "mfu", "mfu_causal")
"""The fields `StepFlops.rates` adds to a training record: step time over a FLOP count, so two equal
runs differ in them as in their step times."""


@dataclass(frozen=True, kw_only=True)
class StepFlops:
    """FLOPs per token of one training step of a model, by attention convention."""

    full: float
    """Attention over the whole s x s."""
    causal: float
    """Causal attention counted half (Megatron-LM's convention)."""

    def rates(self, tokens: int, seconds: float, gpus: int, peak_tflops: float | None) -> dict[str, float]:
        """The log's fields for a step of `tokens` tokens over `gpus` GPUs in `seconds`."""
        out: dict[str, float] = {}
        for suffix, per_token in (("", self.full), ("_causal", self.causal)):
            tflops = per_token * tokens / seconds / gpus / 1e12
            out[f"tflops_per_gpu{suffix}"] = tflops
            if peak_tflops:
                out[f"mfu{suffix}"] = tflops / peak_tflops
        return out


def step_flops(config: Any, vocab: int, seq: int, dims: Any = None) -> StepFlops:
    """FLOPs per token of the model built at TransformerConfig `config` (the widened one for SCALE,
    whose geometry is `dims`: ScaleDims), vocabulary `vocab`, sequence `seq`."""
    layers = config.num_layers
    if dims is None:
        shape = flops.Shape(hidden=config.hidden_size, heads=config.num_attention_heads,
                            groups=config.num_query_groups, head_dim=config.kv_channels, ffn=config.ffn_hidden_size)
        full = flops.model_flops("full_ft", shape, seq, layers, vocab)
        heads = shape.heads
    else:
        shape = flops.Shape(hidden=dims.hidden, heads=dims.heads, groups=dims.groups, head_dim=dims.head_dim,
                            ffn=dims.ffn, hidden_up=dims.hidden_up, heads_up=dims.heads_up, groups_up=dims.groups_up,
                            ffn_up=dims.ffn_up)
        full = flops.head_flops("preserve", shape, vocab)
        for layer in range(layers):
            modules = tuple(m for m in ("qkv", "proj", "fc1", "fc2") if dims.adapts(layer, m))
            full += flops.layer_flops("adapt" if modules else "preserve", shape, seq, modules)
        heads = shape.heads + shape.heads_up
    causal = full - layers * flops.attention(seq, heads, shape.head_dim) / 2
    return StepFlops(full=float(full), causal=float(causal))

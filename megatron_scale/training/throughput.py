"""TFLOP/s per GPU and MFU of a training step, as Megatron-LM logs them.

    tflops_per_gpu = FLOPs per token x tokens per step / step time / GPUs / 1e12
    mfu            = tflops_per_gpu / --peak-tflops

FLOPs per token are the FLOP model's (model/flops.py: the GEMMs, forward and backward) of the
model the run trains, its method's (TrainingMethod.flops_per_token): for a SCALE model its geometry's
(the frozen blocks without weight gradient, W12 where Adapt has it); for the dense methods (full,
freeze, LoRA, LLaMA-Pro at its grown depth) every GEMM trained, Megatron-LM's convention (frozen
layers still counted). Two attention
conventions, both logged:
    full    QK^T and AV over the whole s x s (flops.py, bench_scale's MFU; NVIDIA's DGX Cloud numbers)
    causal  that attention term halved, as Megatron-LM counts causal attention (`_causal` fields)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megatron_scale.methods import TrainingMethod
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


def step_flops(config: Any, vocab: int, seq: int, method: TrainingMethod) -> StepFlops:
    """FLOPs per token of the model `method` builds at TransformerConfig `config` (the widened one
    for SCALE), vocabulary `vocab`, sequence `seq`."""
    full = method.flops_per_token(config, vocab, seq)
    causal = full - config.num_layers * flops.attention(seq, config.num_attention_heads, config.kv_channels) / 2
    return StepFlops(full=float(full), causal=float(causal))

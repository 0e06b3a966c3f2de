"""Core attention through torch's scaled_dot_product_attention (--attention-backend).

megatron-core's local DotProductAttention materialises the [b, heads, s, s] score matrix, in the
activation dtype, then its softmax and the probabilities, and keeps them for the backward: at
Llama-3.2-1B's shape and seq 4096 that is 1 GiB per layer for 32 heads, 1.25 GiB for
SCALE-Preserve's 40. `SDPAttention` is the same module (it subclasses DotProductAttention: same
constructor, geometry, softmax scale and checkpoint entries) with its forward through
`torch.nn.functional.scaled_dot_product_attention`, whose flash and memory-efficient kernels on
CUDA never write the scores out.

SCALE's attention is one call over all of this rank's heads. The widened layer has h + h' query
heads in g + g' KV groups at the base's GQA ratio r = h/g = h'/g' (config.py enforces it), laid
out per tensor-parallel rank as [base heads; new heads] and [base groups; new groups]
(partition.py). Grouped attention maps query head i to KV group i // r, so base heads read only
base K/V and new heads only new K/V, exactly the rule of shared/design/scale-method.md; a second
call is never needed. GQA: SDPA's `enable_gqa` where its kernel takes groups natively (the flash
kernels: 16-bit on CUDA, and the CPU kernel), K/V repeated per head otherwise (the CUDA
memory-efficient kernel, fp32, takes no groups and would fall back to the math kernel, which
materialises the scores).

Semantics, against megatron-core's local path:
- layout: megatron's [s, b, heads, d] in, [s, b, heads * d] out; SDPA works on [b, heads, s, d]
  views (no copy of Q, K or V where the kernel takes strided inputs);
- softmax: the kernels accumulate scores and softmax in fp32 for 16-bit inputs (megatron's
  attention_softmax_in_fp32), and never round the scores to bf16 as megatron's baddbmm does, so
  under bf16 SDPA should be the more exact of the two (tests/model/test_sdpa.py's GPU test compares
  them in bf16 on CUDA; not yet run);
- masks: with AttnMaskType.causal and a square score matrix the kernel's own causal mask is used
  and the attention_mask argument is not read. That is megatron-core's contract ("in case
  attn_mask_type is causal the mask is generated and None can be passed"), what its fused softmax
  and Transformer Engine's attention do; every caller here passes the causal mask. Any other mask
  type, or a decode step (sq != sk), goes through megatron-core's local forward unchanged;
- dropout: SDPA's dropout_p while training, under megatron's model-parallel RNG fork as the
  local path does (a different draw of the same distribution);
- not covered (clear error at build): softmax types other than vanilla, sliding windows.

`--attention-backend` (megatron's flag name; its `local` keeps megatron's meaning):
    auto   SDPA on CUDA, megatron-core's local path on any other device (decided per call from
           the query's device, so a model built on the host and moved to a GPU gets SDPA);
    sdpa   SDPA on every device;
    local  megatron-core's DotProductAttention.
auto is the default: on CUDA SDPA is exact to fp32 rounding and faster; on CPU it is the local
path, so CPU results (the demo, the documented numbers) stay bit for bit what they were.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from megatron_scale import _mcore as mc

ATTENTION_BACKENDS = ("auto", "local", "sdpa")
FLAG = "--attention-backend"


class SDPAttention(mc.DotProductAttention):
    """megatron-core's DotProductAttention with its forward through SDPA (module docstring).

    `kernel`: "sdpa" (always SDPA) or "auto" (SDPA for CUDA tensors, the local path otherwise)."""

    def __init__(self, *args: Any, kernel: str = "sdpa", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kernel not in ("auto", "sdpa"):
            raise ValueError(f"SDPAttention: kernel must be 'auto' or 'sdpa', got {kernel!r}")
        cfg = self.config
        if cfg.softmax_type != "vanilla":
            raise ValueError(f"{FLAG} {kernel}: softmax_type {cfg.softmax_type!r} is not supported by SDPA; "
                             f"use {FLAG} local")
        if cfg.window_size is not None:
            raise ValueError(f"{FLAG} {kernel}: sliding-window attention is not supported by SDPA; use {FLAG} local")
        if self.num_attention_heads_per_partition % self.num_query_groups_per_partition:
            raise ValueError(f"SDPAttention: {self.num_attention_heads_per_partition} heads per rank are not whole "
                             f"groups of {self.num_query_groups_per_partition} KV groups")
        self.kernel = kernel
        # megatron divides its baddbmm scale by the layer number under query-key layer scaling
        # and multiplies the softmax input back by it: the net scale is the one before.
        coeff = self.layer_number if cfg.apply_query_key_layer_scaling else 1
        self.sdpa_scale = self.softmax_scale * coeff

    def uses_sdpa(self, query: torch.Tensor, attn_mask_type: Any = None) -> bool:
        """Whether a call with this query runs SDPA (else megatron-core's local forward)."""
        if self.kernel == "auto" and query.device.type != "cuda":
            return False
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        return mask_type == mc.AttnMaskType.causal

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: Any = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: Any = None,
    ) -> torch.Tensor:
        """[sq, b, heads, d] query, [sk, b, groups, d] key and value -> [sq, b, heads * d]."""
        sq, sk = query.size(0), key.size(0)
        if (attention_bias is not None or packed_seq_params is not None or sq != sk
                or not self.uses_sdpa(query, attn_mask_type)):
            return super().forward(query, key, value, attention_mask, attn_mask_type=attn_mask_type,
                                   attention_bias=attention_bias, packed_seq_params=packed_seq_params)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, n, s, d] views
        ratio = q.size(1) // k.size(1)
        native_gqa = q.device.type != "cuda" or q.dtype in (torch.float16, torch.bfloat16)
        if ratio > 1 and not native_gqa:
            k, v = k.repeat_interleave(ratio, dim=1), v.repeat_interleave(ratio, dim=1)
        dropout = self.attention_dropout.p if self.training else 0.0

        def attend() -> torch.Tensor:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout, is_causal=True, scale=self.sdpa_scale,
                enable_gqa=ratio > 1 and native_gqa,
            )

        if dropout > 0 and not self.config.sequence_parallel:
            with mc.tensor_parallel.get_cuda_rng_tracker().fork():
                context = attend()
        else:
            context = attend()
        # [b, n, sq, d] -> [sq, b, n * d]
        return context.permute(2, 0, 1, 3).reshape(sq, query.size(1), self.hidden_size_per_partition)


def core_attention(backend: str) -> Any:
    """The core_attention of a local layer spec for `--attention-backend backend`."""
    check_attention_backend(backend)
    if backend == "local":
        return mc.DotProductAttention
    return partial(SDPAttention, kernel=backend)


def check_attention_backend(backend: str, transformer_impl: str = "local") -> None:
    """ValueError naming the flag for a backend this build cannot use."""
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(f"{FLAG}: {backend!r} is not one of {', '.join(ATTENTION_BACKENDS)}")
    if transformer_impl == "transformer_engine" and backend != "auto":
        raise ValueError(f"{FLAG} {backend} needs --transformer-impl local; with transformer_engine, "
                         "Transformer Engine's attention picks its own kernel (leave the flag at auto)")

"""The inputs a megatron-core GPT model takes besides token ids, made on the caller's device."""

from __future__ import annotations

import torch


def causal_mask(seq_length: int, device: torch.device) -> torch.Tensor:
    """[1, 1, s, s] bool on `device`, True where attention is masked (megatron-core's convention)."""
    return torch.ones(1, 1, seq_length, seq_length, dtype=torch.bool, device=device).triu(diagonal=1)


def position_ids(batch: int, seq_length: int, device: torch.device) -> torch.Tensor:
    """[b, s] positions 0..s-1 on `device`."""
    return torch.arange(seq_length, device=device).expand(batch, seq_length).contiguous()

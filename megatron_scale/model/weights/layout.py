"""megatron-core's fused layouts, as pure tensor functions (no process group).

linear_qkv rows are interleaved per query group: for each of the g groups, the ratio = h/g query
heads, then one key head, then one value head, k rows each. linear_fc1 rows are [gate; up].
Used by the upscale init (new rows per q/k/v and per gate/up) and by checkpoint conversion.
"""

from __future__ import annotations

import torch


def split_qkv(w: torch.Tensor, groups: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[(h + 2g) k, n] interleaved -> q [h k, n], k [g k, n], v [g k, n]."""
    per_group = w.shape[0] // groups
    ratio = per_group // head_dim - 2
    grouped = w.reshape(groups, ratio + 2, head_dim, -1)
    q = grouped[:, :ratio].reshape(groups * ratio * head_dim, -1)
    k = grouped[:, ratio].reshape(groups * head_dim, -1)
    v = grouped[:, ratio + 1].reshape(groups * head_dim, -1)
    return q, k, v


def merge_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int, head_dim: int) -> torch.Tensor:
    """Inverse of split_qkv."""
    n = q.shape[-1]
    ratio = q.shape[0] // (groups * head_dim)
    grouped = torch.cat(
        (
            q.reshape(groups, ratio, head_dim, n),
            k.reshape(groups, 1, head_dim, n),
            v.reshape(groups, 1, head_dim, n),
        ),
        dim=1,
    )
    return grouped.reshape(groups * (ratio + 2) * head_dim, n)


def split_gate_up(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[2f, n] -> gate [f, n], up [f, n]."""
    gate, up = w.chunk(2, dim=0)
    return gate, up

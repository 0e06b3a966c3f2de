"""SCALE-Route: a parameter-free, token-level choice between the two output heads.

    z_p = W_out h                  preservation head (original dims only)
    z_a = z_p + W_out_up h_up      adaptation head
    per token: emit z_p if cos(z_p, z_a) >= tau, else z_a

Under vocab parallelism each rank holds a vocab slice of both heads, so the three dot products
z_p.z_a, z_p.z_p, z_a.z_a are partial sums, all-reduced over the TP group: [3, tokens] floats
travel, never the logits. No gradient flows through the choice (training uses z_a's loss).
cos is clamped to [-1, 1]: tau = -1 always keeps z_p, tau > 1 always emits z_a; tau = 1 keeps
z_p exactly where z_a is a positive multiple of z_p (at init, z_a == z_p everywhere). Where a
head is all zero the cosine is undefined; the token keeps z_p (cos taken as 1).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def route_statistics(z_p: torch.Tensor, z_a: torch.Tensor) -> torch.Tensor:
    """Per-token partial sums over the local vocab slice: [3, ...] = (z_p.z_a, |z_p|^2, |z_a|^2).

    Accumulated in fp32 whatever the logits dtype. The C++ op (performance issue) must match this."""
    p, a = z_p.float(), z_a.float()
    return torch.stack(((p * a).sum(-1), (p * p).sum(-1), (a * a).sum(-1)))


def route(
    z_p: torch.Tensor,
    z_a: torch.Tensor,
    tau: float,
    group: dist.ProcessGroup | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Routed logits and the boolean per-token mask of tokens sent to the preservation head.

    z_p, z_a: [..., V_local] vocab-parallel slices of the two heads on this rank."""
    with torch.no_grad():
        stats = route_statistics(z_p, z_a)
        if group is not None and dist.get_world_size(group) > 1:
            dist.all_reduce(stats, group=group)
        dot, pp, aa = stats
        denom = torch.sqrt(pp * aa)
        cos = torch.where(denom > 0, dot / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.ones_like(dot))
        keep = cos.clamp(-1.0, 1.0) >= tau
    return torch.where(keep.unsqueeze(-1), z_p, z_a), keep

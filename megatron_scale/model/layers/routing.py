"""SCALE-Route: a parameter-free, token-level choice between the two output heads.

    z_p = W_out h                  preservation head (original dims only)
    z_a = z_p + W_out_up h_up      adaptation head
    per token: emit z_p if cos(z_p, z_a) >= tau, else z_a
    (or another parameter-free statistic of the two heads >= tau: route_stats/statistics.py)
    direction "below" reverses the side: emit z_p if the statistic <= tau (issue 35: on a byte-level
    tokenizer the cosine came out lower on the old domain), else z_a
    unit char / word: all the tokens of one UTF-8 character or word take the decision of the
    unit's first token (route_units.py; `starts` marks where units begin)

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

from megatron_scale.model.layers.route_units import first_of_units
from megatron_scale.route_stats.statistics import router_statistic


def keeps(stat: torch.Tensor, tau: float, direction: str = "above") -> torch.Tensor:
    """Boolean mask of tokens kept on the preservation head: stat >= tau ("above", the paper's)
    or stat <= tau ("below")."""
    if direction == "above":
        return stat >= tau
    if direction == "below":
        return stat <= tau
    raise ValueError(f"unknown router direction {direction!r}; choose one of above, below")


def route(
    z_p: torch.Tensor,
    z_a: torch.Tensor,
    tau: float,
    group: dist.ProcessGroup | None = None,
    statistic: str = "cosine",
    direction: str = "above",
    starts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Routed logits and the boolean per-token mask of tokens sent to the preservation head
    (where the router statistic, route_stats/statistics.py, is >= tau, or <= tau with direction "below";
    the paper's is the cosine, above).

    z_p, z_a: [s, b, V_local] vocab-parallel slices of the two heads on this rank; starts: None
    (per token) or [s, b] bool, where a routing unit begins (every token of a unit takes its first
    token's decision)."""
    with torch.no_grad():
        keep = keeps(router_statistic(statistic, z_p, z_a, group), tau, direction)
        if starts is not None:
            keep = first_of_units(keep, starts, dim=0)
    return torch.where(keep.unsqueeze(-1), z_p, z_a), keep

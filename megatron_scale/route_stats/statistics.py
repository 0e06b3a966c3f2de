"""Parameter-free per-token statistics a SCALE-Route router compares with tau (keep z_p where
statistic >= tau), each computed from vocab-parallel slices of the two heads' logits:

    cosine            cos(z_p, z_a)                               the paper's router (default)
    centered-cosine   cos(z_p - mean z_p, z_a - mean z_a)         ignores a shift shared by all logits
    max-prob          max_v softmax(z_p)_v                        how sure the preservation head is
    certainty         1 - H(softmax(z_p)) / log V                 the same, from the whole distribution

Rank r holds vocab rows [V/tp * r, V/tp * (r+1)) of z_p and z_a ([..., V/tp]); every statistic
needs only per-token partial sums (or maxima) all-reduced over the TP group, fp32, [k, tokens]
floats: the logits are never gathered. No gradient flows through any of them.
cosine and centered-cosine are clamped to [-1, 1] and taken as 1 where a vector is all zero (the
token keeps z_p); max-prob lies in [1/V, 1], certainty in [0, 1].
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from megatron_scale.route_stats.sums import route_statistics

STATISTICS = ("cosine", "centered-cosine", "max-prob", "certainty")


def tp_all_reduce(t: torch.Tensor, group: dist.ProcessGroup | None, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> torch.Tensor:
    """All-reduce `t` in place over the TP group (no-op without one); returns it."""
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=op, group=group)
    return t


def _tp_size(group: dist.ProcessGroup | None) -> int:
    return dist.get_world_size(group) if group is not None else 1


def _cosine_from(dot: torch.Tensor, pp: torch.Tensor, aa: torch.Tensor) -> torch.Tensor:
    denom = torch.sqrt(pp * aa)
    cos = torch.where(denom > 0, dot / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.ones_like(dot))
    return cos.clamp(-1.0, 1.0)


def cosine(z_p: torch.Tensor, z_a: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """cos(z_p, z_a) per token: three partial sums (route_sums.route_statistics, the C++ op on CPU)."""
    dot, pp, aa = tp_all_reduce(route_statistics(z_p, z_a), group)
    return _cosine_from(dot, pp, aa)


def centered_cosine(z_p: torch.Tensor, z_a: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Cosine of the mean-centred logits: first the two means (one all-reduce of [2, tokens]), then
    the cosine's three partial sums of the centred slices (another)."""
    p, a = z_p.float(), z_a.float()
    vocab = p.shape[-1] * _tp_size(group)
    means = tp_all_reduce(torch.stack((p.sum(-1), a.sum(-1))), group) / vocab
    dot, pp, aa = tp_all_reduce(route_statistics(p - means[0].unsqueeze(-1), a - means[1].unsqueeze(-1)), group)
    return _cosine_from(dot, pp, aa)


def _softmax_sums(z_p: torch.Tensor, group: dist.ProcessGroup | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(global max m, S = sum exp(z - m), T = sum exp(z - m) (z - m)) per token of z_p."""
    p = z_p.float()
    m = tp_all_reduce(p.max(-1).values, group, dist.ReduceOp.MAX)
    shifted = p - m.unsqueeze(-1)
    e = shifted.exp()
    sums = tp_all_reduce(torch.stack((e.sum(-1), (e * shifted).sum(-1))), group)
    return m, sums[0], sums[1]


def max_prob(z_p: torch.Tensor, z_a: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The preservation head's top probability, 1 / sum_v exp(z_v - max z) (z_a is not read)."""
    _, s, _ = _softmax_sums(z_p, group)
    return 1.0 / s


def certainty(z_p: torch.Tensor, z_a: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """1 - H / log V with H = log S - T / S the entropy of softmax(z_p) (z_a is not read)."""
    _, s, t = _softmax_sums(z_p, group)
    vocab = z_p.shape[-1] * _tp_size(group)
    entropy = s.log() - t / s
    return (1.0 - entropy / math.log(vocab)).clamp(0.0, 1.0) if vocab > 1 else torch.ones_like(s)


_FUNCTIONS = {"cosine": cosine, "centered-cosine": centered_cosine, "max-prob": max_prob, "certainty": certainty}


def router_statistic(
    name: str, z_p: torch.Tensor, z_a: torch.Tensor, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The statistic `name` per token, fp32 [...] for logits [..., V/tp]; the same on every TP rank."""
    if name not in _FUNCTIONS:
        raise ValueError(f"unknown router statistic {name!r}; choose one of {', '.join(STATISTICS)}")
    with torch.no_grad():
        return _FUNCTIONS[name](z_p, z_a, group)

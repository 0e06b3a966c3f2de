"""Every threshold's trade-off from per-token records (route_stats/token_records.py), no model needed.

A record set holds, per token of one eval set, the router statistic s, the loss under each head
(loss_p, loss_a) and whether each head's top token is the label (correct_p, correct_a). Routing
at tau emits z_p where s >= tau (direction "above", the paper's; "below": where s <= tau, written
k_t below), so per set

    routed loss(tau)      = mean_t [ k_t ? loss_p_t : loss_a_t ]      perplexity = exp(.)
    routed accuracy(tau)  = mean_t [ k_t ? correct_p_t : correct_a_t ]
    kept on z_p(tau)      = mean_t [ k_t ]

As a classifier of old-domain (positive) against new-domain tokens, s gives the ROC curve
(TPR = old tokens kept on z_p, FPR = new tokens kept on z_p, over every threshold) and its AUC,
P(s_old > s_new) + P(s_old = s_new) / 2 above; below, the same of -s, i.e. 1 - AUC(above).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from megatron_scale.model.layers.routing import keeps

Records = Mapping[str, torch.Tensor]
METRICS = ("ppl", "accuracy")


def stat_key(statistic: str) -> str:
    return f"stat/{statistic}"


def routed_mean(a_p: torch.Tensor, a_a: torch.Tensor, stat: torch.Tensor, tau: float, direction: str = "above") -> float:
    """Mean over tokens of a_p where the token is kept on z_p (routing.keeps), else a_a (fp64 sum
    of the fp32 values)."""
    if stat.numel() == 0:
        return math.nan
    return float(torch.where(keeps(stat, tau, direction), a_p.double(), a_a.double()).mean())


def metric_at(records: Records, statistic: str, tau: float, metric: str, direction: str = "above") -> float:
    """The routed perplexity (metric 'ppl') or top-1 accuracy ('accuracy') of one set at tau."""
    stat = records[stat_key(statistic)]
    if metric == "ppl":
        return math.exp(min(routed_mean(records["loss_p"], records["loss_a"], stat, tau, direction), 700.0))
    if metric == "accuracy":
        return routed_mean(records["correct_p"], records["correct_a"], stat, tau, direction)
    raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")


def head_metric(records: Records, head: str, metric: str) -> float:
    """A head alone ('p' or 'a'): its perplexity or accuracy."""
    values = records[("loss_" if metric == "ppl" else "correct_") + head].double()
    mean = float(values.mean()) if values.numel() else math.nan
    return math.exp(min(mean, 700.0)) if metric == "ppl" else mean


def default_grid(stats: Sequence[torch.Tensor], points: int = 41) -> list[float]:
    """Quantiles of the pooled statistic (so every part of the curve has points), with just
    below the minimum and just above the maximum: every token on z_p at one end and on z_a at the
    other, in either direction."""
    pooled = torch.cat([s.double().flatten() for s in stats])
    if pooled.numel() == 0:
        raise ValueError("default_grid: no tokens")
    q = torch.quantile(pooled, torch.linspace(0, 1, points, dtype=torch.float64, device=pooled.device))
    top, bottom = torch.tensor(float(pooled.max()), dtype=torch.float32), torch.tensor(float(pooled.min()), dtype=torch.float32)
    above = float(torch.nextafter(top, torch.tensor(math.inf)))
    below = float(torch.nextafter(bottom, torch.tensor(-math.inf)))
    return sorted({float(torch.tensor(float(v), dtype=torch.float32)) for v in q} | {above, below})


def sweep(sets: Mapping[str, Records], statistic: str, taus: Sequence[float], metric: str,
          direction: str = "above") -> list[dict[str, Any]]:
    """One point per tau: {tau, <set>: metric, <set>_kept: share on z_p}, routed in `direction`."""
    points = []
    for tau in taus:
        point: dict[str, Any] = {"tau": float(tau)}
        for name, rec in sets.items():
            point[name] = metric_at(rec, statistic, tau, metric, direction)
            stat = rec[stat_key(statistic)]
            point[f"{name}_kept"] = float(keeps(stat, tau, direction).double().mean()) if stat.numel() else math.nan
        points.append(point)
    return points


def roc(old: torch.Tensor, new: torch.Tensor, direction: str = "above") -> dict[str, Any]:
    """ROC of 'keep on z_p' (s >= tau above, s <= tau below) with old-domain tokens positive:
    fpr/tpr at every distinct threshold (from the strictest), and the AUC with ties counted half."""
    if old.numel() == 0 or new.numel() == 0:
        raise ValueError("roc: both the old-domain and the new-domain set need tokens")
    sign = {"above": 1.0, "below": -1.0}[direction]
    o, n = sign * old.double().flatten(), sign * new.double().flatten()
    thresholds = torch.unique(torch.cat((o, n))).flip(0)
    o_sorted, n_sorted = o.sort().values, n.sort().values
    # share of each set with s >= t: 1 - (count below t) / size
    tpr = 1.0 - torch.searchsorted(o_sorted, thresholds, side="left").double() / o.numel()
    fpr = 1.0 - torch.searchsorted(n_sorted, thresholds, side="left").double() / n.numel()
    below = torch.searchsorted(n_sorted, o, side="left").double()
    ties = torch.searchsorted(n_sorted, o, side="right").double() - below
    auc = float((below + 0.5 * ties).sum() / (o.numel() * n.numel()))
    return {"fpr": [0.0, *fpr.tolist()], "tpr": [0.0, *tpr.tolist()], "thresholds": (sign * thresholds).tolist(),
            "auc": auc}

"""The router's controls and a deployable operating point, from per-token records (no model).

    random_sweep   z_p and z_a mixed at random, each token taking z_a with probability f, at
                   every f of a grid: the expected metric, (1 - f) of z_p's plus f of z_a's
                   per token (route_stats/mixing.py), so no draw adds noise
    alpha_sweep    one global weight, z_p + alpha (z_a - z_p), at every alpha the records hold
                   (mixing.mixing_records)
    crossfit       the router as it could be deployed: tau and direction calibrated on the other
                   fold(s) of held-out groups (people, windows) and applied to each fold, so no
                   record is routed by a tau chosen with it; the metric over all the folds

Each sweep is a list of points like curves.sweep's ({"rate" or "alpha", <set>: metric,
<set>_kept: share on z_p}), so a frontier reads them like a router's tau sweep.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from megatron_scale.model.layers.routing import keeps
from megatron_scale.route_eval.calibrate import calibrate
from megatron_scale.route_eval.curves import METRICS, Records, stat_key
from megatron_scale.route_stats.mixing import ALPHAS, alpha_key

RATES = ALPHAS  # 0, 0.05, ..., 1


def _value(loss_or_correct: torch.Tensor, metric: str) -> float:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if loss_or_correct.numel() == 0:
        return math.nan
    mean = float(loss_or_correct.double().mean())
    return math.exp(min(mean, 700.0)) if metric == "ppl" else mean


def _per_token(records: Records, head: str, metric: str) -> torch.Tensor:
    return records[("loss_" if metric == "ppl" else "correct_") + head].double()


def random_metric(records: Records, rate: float, metric: str) -> float:
    """The expected perplexity (of the expected mean loss) or accuracy when every token takes z_a
    with probability `rate`."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"random mixing: the rate must lie in [0, 1], got {rate!r}")
    return _value((1.0 - rate) * _per_token(records, "p", metric) + rate * _per_token(records, "a", metric), metric)


def random_sweep(sets: Mapping[str, Records], rates: Sequence[float] = RATES, metric: str = "accuracy") -> list[dict[str, Any]]:
    """One point per rate: {rate, <set>: expected metric, <set>_kept: 1 - rate}."""
    return [{"rate": float(f), **{k: v for name, rec in sets.items()
                                  for k, v in ((name, random_metric(rec, f, metric)), (f"{name}_kept", 1.0 - f))}}
            for f in rates]


def alphas_in(records: Records) -> list[float]:
    """The alphas whose mixture the records score (mixing.mixing_records), ascending."""
    found = {float(m[1]) for k in records if (m := re.fullmatch(r"alpha/([^/]+)/correct", k))}
    return sorted(found)


def alpha_metric(records: Records, alpha: float, metric: str) -> float:
    key = alpha_key(alpha, "loss" if metric == "ppl" else "correct")
    if key not in records:
        raise KeyError(f"the records hold no alpha {alpha:g} (keys {alpha_key(alpha, '*')}): score it with "
                       "route_stats.mixing.mixing_records")
    return _value(records[key], metric)


def alpha_sweep(sets: Mapping[str, Records], alphas: Sequence[float] | None = None,
                metric: str = "accuracy") -> list[dict[str, Any]]:
    """One point per alpha (default: every alpha all the sets hold): {alpha, <set>: metric}."""
    if alphas is None:
        common = set.intersection(*(set(alphas_in(r)) for r in sets.values())) if sets else set()
        alphas = sorted(common)
    return [{"alpha": float(a), **{name: alpha_metric(rec, a, metric) for name, rec in sets.items()}} for a in alphas]


def crossfit(old: tuple[str, Records], new: tuple[str, Records], statistic: str, metric: str, *,
             keep_old: float, old_folds: torch.Tensor, new_folds: torch.Tensor, min_new_adapt: float | None = None,
             direction: str | None = None) -> dict[str, Any]:
    """The router with tau (and, unless `direction` is imposed, its direction) calibrated per
    fold on the records of every other fold (route_eval.calibrate, target keep_old), applied to
    that fold's records: the routed metric of each set over all its records, the share kept on
    z_p, and each fold's tau and direction. `*_folds` give each record's fold (integers)."""
    (old_name, o), (new_name, n) = old, new
    key = stat_key(statistic)
    so, sn = o[key].flatten(), n[key].flatten()
    if old_folds.shape != so.shape or new_folds.shape != sn.shape:
        raise ValueError(f"crossfit: {old_folds.numel()} / {new_folds.numel()} fold labels for {so.numel()} / "
                         f"{sn.numel()} records")
    folds = sorted(set(old_folds.tolist()) | set(new_folds.tolist()))
    if len(folds) < 2:
        raise ValueError(f"crossfit: needs at least two folds, got {folds}")
    kept_o, kept_n = torch.zeros_like(so, dtype=torch.bool), torch.zeros_like(sn, dtype=torch.bool)
    per_fold = []
    for f in folds:
        in_o, in_n = old_folds == f, new_folds == f
        cal = calibrate(so[~in_o], sn[~in_n], statistic, keep_old, min_new_adapt, direction)
        kept_o[in_o] = keeps(so[in_o], cal.tau, cal.direction)
        kept_n[in_n] = keeps(sn[in_n], cal.tau, cal.direction)
        per_fold.append({"fold": f, "tau": cal.tau, "direction": cal.direction, "calibration_old_kept": cal.old_kept,
                         "calibration_new_adapted": cal.new_adapted, "old_records": int(in_o.sum()),
                         "new_records": int(in_n.sum())})

    def routed(rec: Records, kept: torch.Tensor) -> float:
        p, a = _per_token(rec, "p", metric).flatten(), _per_token(rec, "a", metric).flatten()
        return _value(torch.where(kept, p, a), metric)

    return {"statistic": statistic, "keep_old": keep_old, old_name: routed(o, kept_o), new_name: routed(n, kept_n),
            f"{old_name}_kept": float(kept_o.double().mean()), f"{new_name}_kept": float(kept_n.double().mean()),
            "folds": per_fold}

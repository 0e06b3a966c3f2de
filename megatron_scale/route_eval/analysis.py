"""Per router statistic, from an old-domain and a new-domain record set: the metric at every tau
of a grid (z_p alone and z_a alone as the ends), the ROC/AUC of the router as an old-vs-new token
classifier, and optionally a calibrated tau (calibrate.py) with the metric it gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from megatron_scale.route_eval.calibrate import calibrate
from megatron_scale.route_eval.curves import Records, default_grid, head_metric, roc, stat_key, sweep
from megatron_scale.route_eval.report import thin


def analyse(
    old: tuple[str, Records], new: tuple[str, Records], statistics: Sequence[str], metric: str, *,
    taus: Sequence[float] | None = None, keep_old: float | None = None, min_new_adapt: float | None = None,
    calibration_sets: tuple[Records, Records] | None = None,
) -> dict[str, Any]:
    """`calibration_sets` (held-out old, new records) pick tau; without them the evaluated sets do."""
    (old_name, old_rec), (new_name, new_rec) = old, new
    sets = {old_name: old_rec, new_name: new_rec}
    out: dict[str, Any] = {
        "old": old_name, "new": new_name, "metric": metric,
        "tokens": {name: int(r["loss_p"].numel()) for name, r in sets.items()},
        "heads": {name: {"z_p": head_metric(r, "p", metric), "z_a": head_metric(r, "a", metric)} for name, r in sets.items()},
        "statistics": {},
    }
    for stat in statistics:
        s_old, s_new = old_rec[stat_key(stat)], new_rec[stat_key(stat)]
        grid = list(taus) if taus else default_grid([s_old, s_new])
        curve = roc(s_old, s_new)
        fpr, tpr = thin(curve["fpr"], curve["tpr"])
        entry: dict[str, Any] = {"points": sweep(sets, stat, grid, metric), "auc": curve["auc"],
                                 "roc": {"fpr": fpr, "tpr": tpr}}
        if keep_old is not None:
            c_old, c_new = calibration_sets if calibration_sets else (old_rec, new_rec)
            cal = calibrate(c_old[stat_key(stat)], c_new[stat_key(stat)], stat, keep_old, min_new_adapt)
            entry["calibration"] = {**cal.record(), "held_out": calibration_sets is not None,
                                    **{k: v for k, v in sweep(sets, stat, [cal.tau], metric)[0].items() if k != "tau"}}
        out["statistics"][stat] = entry
    return out

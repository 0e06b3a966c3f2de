"""Per router statistic, from an old-domain and a new-domain record set: the metric at every tau
of a grid (z_p alone and z_a alone as the ends), the ROC/AUC of the router as an old-vs-new token
classifier, and optionally a calibrated direction and tau (calibrate.py) with the metric they give.

Each statistic's entry says its direction ("above": z_p where s >= tau, the paper's; "below":
z_p where s <= tau): the calibration's where one is made, else the imposed one, else the side
where the AUC is at least 0.5. Its points and ROC are in that direction; "auc" stays the paper's
direction (above) and "auc_by_direction" holds both (below = 1 - above). Where the cosine's
direction is not the paper's, "paper_points" sweeps it in the paper's (the paper's own router).
"controls" (controls.py): random mixing of the two heads at every rate, and the global weight
alpha at every alpha the records hold (route_stats/mixing.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from megatron_scale.route_eval import controls
from megatron_scale.route_eval.calibrate import calibrate
from megatron_scale.route_eval.curves import Records, default_grid, head_metric, roc, stat_key, sweep
from megatron_scale.route_eval.report import thin


def analyse(
    old: tuple[str, Records], new: tuple[str, Records], statistics: Sequence[str], metric: str, *,
    taus: Sequence[float] | None = None, keep_old: float | None = None, min_new_adapt: float | None = None,
    calibration_sets: tuple[Records, Records] | None = None, direction: str | None = None,
) -> dict[str, Any]:
    """`calibration_sets` (held-out old, new records) pick tau and direction; without them the
    evaluated sets do. `direction` None: chosen per statistic; else imposed on every one."""
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
        auc = roc(s_old, s_new)["auc"]
        cal = None
        if keep_old is not None:
            c_old, c_new = calibration_sets if calibration_sets else (old_rec, new_rec)
            cal = calibrate(c_old[stat_key(stat)], c_new[stat_key(stat)], stat, keep_old, min_new_adapt, direction)
        chosen = cal.direction if cal else direction or ("above" if auc >= 0.5 else "below")
        curve = roc(s_old, s_new, chosen)
        fpr, tpr = thin(curve["fpr"], curve["tpr"])
        entry: dict[str, Any] = {"direction": chosen, "points": sweep(sets, stat, grid, metric, chosen), "auc": auc,
                                 "auc_by_direction": {"above": auc, "below": 1.0 - auc},
                                 "roc": {"fpr": fpr, "tpr": tpr}}
        if cal is not None:
            at = sweep(sets, stat, [cal.tau], metric, cal.direction)[0]
            entry["calibration"] = {**cal.record(), "held_out": calibration_sets is not None,
                                    **{k: v for k, v in at.items() if k != "tau"}}
        if stat == "cosine" and chosen != "above":
            entry["paper_points"] = sweep(sets, stat, grid, metric, "above")
        out["statistics"][stat] = entry
    out["controls"] = {"random": controls.random_sweep(sets, metric=metric)}
    if all(controls.alphas_in(r) for r in sets.values()):
        out["controls"]["alpha"] = controls.alpha_sweep(sets, metric=metric)
    return out

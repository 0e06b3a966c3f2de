"""The report's SCALE-Route section: the router sweep (tools/route_sweep.py's sweep.json) as a
table per router statistic (its direction, i.e. which side of tau keeps z_p, its AUC as an
old-vs-new token classifier in that direction, the calibrated tau and what that tau gives on the
evaluated held-out windows; a sweep.json written before directions existed reads as "above"), z_p alone and z_a alone as the two ends, and the
sweep's plot copied next to report.md.

Standard library only; kept apart from reports/recipe.py's method table so either can change alone.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from megatron_scale import artifacts
from megatron_scale.durable import atomic_write

PLOT = "route_sweep.png"


def read_sweep(path: str | os.PathLike) -> dict[str, Any]:
    """sweep.json as it stands, unchecked; one error naming the file where it is missing or not JSON."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--route-sweep {p}: no such file (did the sweep step run?)")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"--route-sweep {p}: not JSON ({e})") from e


def swept(sweep: dict[str, Any]) -> tuple[Any, Any]:
    """The (old, new) sets a sweep scored."""
    return sweep.get("old"), sweep.get("new")


def load_sweep(path: str | os.PathLike, old: str, new: str) -> dict[str, Any]:
    """sweep.json, checked to hold the two sets and a calibration per statistic."""
    p = Path(path)
    sweep = read_sweep(p)
    if swept(sweep) != (old, new):
        raise ValueError(f"--route-sweep {p}: swept {sweep.get('old')!r} against {sweep.get('new')!r}, "
                         f"the report compares {old!r} against {new!r}")
    missing = [stat for stat, r in sweep.get("statistics", {}).items() if "calibration" not in r]
    if not sweep.get("statistics") or missing:
        raise ValueError(f"--route-sweep {p}: no calibrated tau for {missing or 'any statistic'} (sweep with --keep-old)")
    return sweep


def summary(sweep: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """The numbers the report shows: per statistic its AUC and calibrated operating point (kept
    shares measured on the evaluated windows), and each head alone."""
    old, new = sweep["old"], sweep["new"]
    settings = sweep.get("settings", {})
    stats = {}
    for stat, r in sweep["statistics"].items():
        cal = r["calibration"]
        direction = cal.get("direction", "above")
        stats[stat] = {
            "direction": direction, "auc": r.get("auc_by_direction", {}).get(direction, r["auc"]),
            "auc_above": r["auc"], "tau": cal["tau"], "reachable": cal["reachable"], "held_out": cal["held_out"],
            f"{old}_ppl": cal[old], f"{new}_ppl": cal[new],
            f"{old}_kept": cal[f"{old}_kept"], f"{new}_to_z_a": 1.0 - cal[f"{new}_kept"],
            f"calibration_{old}_kept": cal["old_kept"], f"calibration_{new}_to_z_a": cal["new_adapted"],
        }
    if settings.get("calibration_old") is None:
        chosen = "on the evaluated windows themselves (in-sample)"
    elif settings.get("calibration_skip"):
        chosen = (f"on windows {settings['calibration_skip']} onwards of {settings['calibration_old']} and "
                  f"{settings['calibration_new']}, held out from the evaluated ones")
    else:
        chosen = f"on the held-out sets {settings['calibration_old']} and {settings['calibration_new']}"
    return {"json": str(path), "load": settings.get("load"), "tokens": sweep["tokens"], "calibrated": chosen,
            "saved": sweep.get("saved"), "calibrate_with": settings.get("calibrate_with"),
            "unit": sweep.get("unit", "token"),
            "keep_old": settings.get("keep_old"), "min_new_adapt": settings.get("min_new_adapt"),
            "heads": sweep["heads"], "statistics": stats}


def markdown(s: dict[str, Any], old: str, new: str, plot: str | None) -> str:
    tok = s["tokens"]
    lines = [
        "", "## SCALE-Route: every tau from one pass", "",
        f"`{s['load']}` on {tok[old]} held-out {old} and {tok[new]} {new} tokens. Calibrated per router: the "
        f"direction (z_p kept where the statistic is >= tau, the paper's, or <= tau) and tau keeping at least "
        f"{_share(s['keep_old'])} of {old} tokens on z_p with the most {new} tokens sent to z_a, chosen "
        f"{s['calibrated']}; the target for {new} is at least {_share(s['min_new_adapt'])} sent to z_a. The AUC is "
        "in the chosen direction (0.5: no separation); the shares and perplexities are measured on the evaluated "
        f"windows. One routing decision per {s['unit']}.", "",
        f"| router | z_p kept where | AUC ({old} vs {new}) | calibrated tau | {old} kept on z_p | {new} sent to z_a "
        f"| {old} PPL | {new} PPL |",
        "|" + "---|" * 8,
    ]
    heads = s["heads"]
    for head, kept, to_a in (("z_p", 1.0, 0.0), ("z_a", 0.0, 1.0)):
        lines.append(f"| {head} alone | | | | {kept:.3f} | {to_a:.3f} | {_ppl(heads[old][head])} | {_ppl(heads[new][head])} |")
    for stat, r in s["statistics"].items():
        target = "" if r["reachable"] else f" ({new} target not reached)"
        where = f"{stat} {'>=' if r['direction'] == 'above' else '<='} tau"
        lines.append(f"| {stat} | {where} | {r['auc']:.3f} | {r['tau']:.4g}{target} | {r[f'{old}_kept']:.3f} "
                     f"| {r[f'{new}_to_z_a']:.3f} | {_ppl(r[f'{old}_ppl'])} | {_ppl(r[f'{new}_ppl'])} |")
    saved = s.get("saved")
    if saved and s.get("calibrate_with") in s["statistics"]:
        r = s["statistics"][s["calibrate_with"]]
        lines += ["", f"The calibrated checkpoint `{saved}` routes by {s['calibrate_with']} per {s['unit']} "
                      f"({s['calibrate_with']} {'>=' if r['direction'] == 'above' else '<='} {r['tau']:.6g} keeps z_p): "
                      "the benchmarks and the Hugging Face export of SCALE-Route use it."]
    if plot:
        lines += ["", f"![every tau of each router statistic, and its ROC]({plot})"]
    return "\n".join(lines) + "\n"


def _share(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:g}%"


def _ppl(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else str(x)


def route_section(path: str | os.PathLike, out_dir: Path, old: str, new: str) -> dict[str, Any]:
    """The section's numbers (summary()) and its markdown ("section"); the sweep's plot copied
    (atomically) to out_dir."""
    sweep = load_sweep(path, old, new)
    s = summary(sweep, path)
    png = Path(path).with_name(artifacts.SWEEP_PLOT.name)
    plot = None
    if png.is_file():
        atomic_write(out_dir / PLOT, png.read_bytes())
        plot = PLOT
    return {**s, "plot": plot, "section": markdown(s, old, new, plot)}

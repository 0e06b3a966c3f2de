"""The sweep's outputs: a JSON of every number and a PNG with the trade-off and the ROC."""

from __future__ import annotations

import json
from typing import Any

from megatron_scale.durable import atomic_write, save_figure


def thin(xs: list[float], ys: list[float], limit: int = 400) -> tuple[list[float], list[float]]:
    """At most `limit` evenly spaced points of a curve (ends kept), for the JSON and the plot."""
    if len(xs) <= limit:
        return xs, ys
    idx = sorted({round(i * (len(xs) - 1) / (limit - 1)) for i in range(limit)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


def write_json(path: str, results: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(results, indent=1) + "\n").encode("utf-8"))


def plot(results: dict[str, Any], path: str) -> None:
    """Left: old-domain against new-domain metric, one point per tau, per statistic (routed in its
    direction, named in the legend), with z_p alone and z_a alone marked. Right: the ROC of each
    statistic as an old-vs-new token classifier, in that direction, with its AUC."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    old, new, metric = results["old"], results["new"], results["metric"]
    fig, (ax, roc_ax) = plt.subplots(1, 2, figsize=(11, 4.4))
    for stat, r in results["statistics"].items():
        direction = r.get("direction", "above")
        auc = r.get("auc_by_direction", {}).get(direction, r["auc"])
        label = f"{stat} {'>=' if direction == 'above' else '<='} tau keeps z_p (AUC {auc:.3f})"
        ax.plot([p[old] for p in r["points"]], [p[new] for p in r["points"]], ".-", label=label)
        roc_ax.plot(r["roc"]["fpr"], r["roc"]["tpr"], label=label)
        cal = r.get("calibration")
        if cal:
            ax.plot([cal[old]], [cal[new]], "k*", ms=10)
    heads = results["heads"]
    for head, marker in (("z_p", "s"), ("z_a", "^")):
        ax.plot([heads[old][head]], [heads[new][head]], marker, color="black", ms=8, label=f"{head} alone")
    ax.set_xlabel(f"old domain ({old}) {metric}")
    ax.set_ylabel(f"new domain ({new}) {metric}")
    ax.set_title(f"routed {metric}, one decision per {results.get('unit', 'token')}, one point per tau (* calibrated)",
                 fontsize=9)
    if metric == "ppl":  # log where perplexities span orders of magnitude; else linear, plain ticks
        for axis, name in ((ax.xaxis, old), (ax.yaxis, new)):
            values = [p[name] for r in results["statistics"].values() for p in r["points"]]
            values += [heads[name]["z_p"], heads[name]["z_a"]]
            if max(values) > 10.0 * min(values):
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
            else:
                axis.set_major_formatter(matplotlib.ticker.ScalarFormatter(useOffset=False))
    roc_ax.plot([0, 1], [0, 1], ":", color="gray")
    roc_ax.set_xlabel(f"{new} tokens kept on z_p (FPR)")
    roc_ax.set_ylabel(f"{old} tokens kept on z_p (TPR)")
    roc_ax.set_title("router as an old-vs-new token classifier")
    for a in (ax, roc_ax):
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)

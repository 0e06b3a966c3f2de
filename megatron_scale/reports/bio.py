"""results.json, a Markdown table and a PNG plot of the benchmark, each written atomically."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from megatron_scale import artifacts
from megatron_scale import method_catalog as catalog
from megatron_scale.durable import atomic_write, save_figure
from megatron_scale.route_eval.report import plot as route_plot


def write_json(path: str, results: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(results, indent=1, sort_keys=False) + "\n").encode("utf-8"))


def _at_or_before(steps: list[int], values: list[float], step: int) -> float:
    best = math.nan
    for s, v in zip(steps, values, strict=True):
        if s <= step:
            best = v
    return best


def first_step_below(steps: list[int], values: list[float], level: float) -> int | None:
    """The first evaluated step at which the accuracy is below `level` (None: never)."""
    return next((s for s, v in zip(steps, values, strict=True) if v < level), None)


def table(results: dict[str, Any]) -> str:
    """One row per method: task-0 accuracy at the start, mid-way and the end of task 1, the first
    step where task 0 fell below half its starting accuracy, task-1 accuracy mid-way and at the
    end, for Route the share of answer tokens sent to z_p at the last evaluation, and time."""
    lines = [
        ("| method | task 0 @0 | task 0 @mid | task 0 @end | task 0 < half of @0 at step | task 1 @mid | task 1 @end "
         "| answers routed to z_p (task 0 / task 1) | seconds |"),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, r in results["methods"].items():
        steps, t0, t1 = r["steps"], r["accuracy"]["task0"], r["accuracy"]["task1"]
        mid = steps[-1] // 2
        below = first_step_below(steps, t0, t0[0] / 2)
        route = r.get("route") or {}
        if route:  # the router's choice at the answer position, at the model's tau
            pf0, pf1 = (route[k][-1]["answer_preserve_fraction"] for k in ("task0", "task1"))
        else:  # older results: the share over every prompt position
            pf0, pf1 = r["preserve_fraction"]["task0"][-1], r["preserve_fraction"]["task1"][-1]
        routed = f"{pf0:.3f} / {pf1:.3f}" if pf0 is not None else "-"
        lines.append(
            f"| {method} | {t0[0]:.3f} | {_at_or_before(steps, t0, mid):.3f} | {t0[-1]:.3f} | "
            f"{below if below is not None else 'never'} | {_at_or_before(steps, t1, mid):.3f} | {t1[-1]:.3f} | "
            f"{routed} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def router_table(results: dict[str, Any]) -> str:
    """For each Route method: per router statistic, the side of tau that keeps z_p (the
    calibrated direction; results from before it: above), the AUC of task 0 vs task 1 at the
    answer position in that direction, the best tau (bio/router.py's rule) and the calibrated
    one, with both accuracies."""
    lines = []
    for method, r in results["methods"].items():
        a = r.get("router")
        if not a:
            continue
        h0, h1 = a["heads"]["task0"], a["heads"]["task1"]
        lines += [
            f"{method} at step {r['steps'][-1]}: z_p alone {h0['z_p']:.3f} / {h1['z_p']:.3f}, "
            f"z_a alone {h0['z_a']:.3f} / {h1['z_a']:.3f} (task 0 / task 1)\n",
            "| statistic | z_p kept where | AUC | best tau | task 0 | task 1 | goal met | calibrated tau | task 0 | task 1 "
            "| task-0 kept on z_p |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for stat, e in a["statistics"].items():
            b, c = e["best"], e["calibration"]
            d = e.get("direction", "above")
            auc = e.get("auc_by_direction", {}).get(d, e["auc"])
            lines.append(f"| {stat} | {stat} {'>=' if d == 'above' else '<='} tau | {auc:.3f} | {b['tau']:.4g} | {b['task0']:.3f} | {b['task1']:.3f} | "
                         f"{'yes' if e['goal_met'] else 'no'} | {c['tau']:.4g} | {c['task0']:.3f} | {c['task1']:.3f} | "
                         f"{c['old_kept']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def expansion_table(results: dict[str, Any]) -> str:
    """Per SCALE method, at mid-way and the end of task 1: what the new output columns
    W_out_up h_up add to the answer logits of each task (bio/evaluate.expansion_effect), beside
    the task-0 accuracy lost. In Preserve and Route this term is the only way task 0 can change."""
    rows = [(m, r) for m, r in results["methods"].items() if r.get("expansion")]
    if not rows:
        return ""
    lines = [
        "What the new output columns add at the answer position, z_a - z_p = W_out_up h_up (task 0 / task 1):\n",
        "| method | step | norm relative to z_p | KL from z_p to z_a, nats | argmax changed | task-0 accuracy lost |",
        "|---|---|---|---|---|---|",
    ]
    for method, r in rows:
        e0, e1, steps, acc0 = r["expansion"]["task0"], r["expansion"]["task1"], r["steps"], r["accuracy"]["task0"]
        for i in sorted({len(steps) // 2, len(steps) - 1}):
            lines.append(f"| {method} | {steps[i]} | {e0[i]['relative_norm']:.3f} / {e1[i]['relative_norm']:.3f} | "
                         f"{e0[i]['kl_p_to_a']:.3f} / {e1[i]['kl_p_to_a']:.3f} | "
                         f"{e0[i]['argmax_changed']:.3f} / {e1[i]['argmax_changed']:.3f} | {acc0[0] - acc0[i]:.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: str) -> None:
    """Two panels over task-1 steps: task-0 retention and task-1 learning, one line per method."""
    try:
        import matplotlib
    except ImportError as e:
        raise RuntimeError("the benchmark's plot needs matplotlib (pip install matplotlib)") from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for method, r in results["methods"].items():
        style = "-" if catalog.method(r.get("method", method)).upscaled else "--"
        for ax, key in zip(axes, ("task0", "task1"), strict=True):
            ax.plot(r["steps"], [100 * v for v in r["accuracy"][key]], style, marker=".", label=method)
    axes[0].set_title("task 0 retention (first-token accuracy, %)")
    axes[1].set_title("task 1 learning (first-token accuracy, %)")
    for ax in axes:
        ax.set_xlabel("task-1 training step")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="center right")
    s = results["settings"]
    fig.suptitle(f"synthetic biographies: {s['pretrain_people']} pre-trained, {s['task0_people']} task 0, "
                 f"{s['task1_people']} task 1 people (seed {s['seed']})", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_all(results: dict[str, Any], out_dir: str) -> dict[str, str]:
    """results.json, table.md and plot.png under `out_dir`; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: str(a.path(out_dir)) for k, a in (("json", artifacts.BIO_RESULTS), ("table", artifacts.BIO_TABLE),
                                                   ("plot", artifacts.BIO_PLOT))}
    write_json(paths["json"], results)
    atomic_write(paths["table"], (table(results) + "\n" + router_table(results) + "\n" + expansion_table(results)
                                  ).encode("utf-8"))
    plot(results, paths["plot"])
    for method, r in results["methods"].items():
        if r.get("router"):
            paths[f"router {method}"] = os.path.join(out_dir, f"router_{method}.png")
            route_plot(r["router"], paths[f"router {method}"])
    return paths

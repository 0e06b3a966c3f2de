"""The control for the gated SCALE-Preserve (notes.md, "The control for the gate").

A 2026-11-29 rewrite of the lost original (an old `.gitignore` pattern `runs/` kept it out of
git); it reproduces the notes' numbers, "+0.009 [+0.003, +0.019] ... single points -0.017 to
+0.034", except the last: the largest single point is exactly 1/30 and prints as +0.033.

What it computes, per seed (1234, 1235, 1236) and per full-fine-tuning LR (seven: 3e-06 to 3e-03;
`--full-lrs 1e-05 3e-05 0.0001 0.0003 0.001 0.003` gives the notes' first figure, over the six LRs
run before 3e-06 was added on 2026-11-29):
- the control point: from `seed<N>/stages/task1_full_lr<LR>.json`, `result.final_records` (the
  run's last evaluation), each probe is answered by the task-0 model z_p (`correct_p`) where z_p's
  max-prob (`stat/max-prob`) >= 0.8, the gate's own statistic and tau, and by the fully
  fine-tuned model (`correct_a`) elsewhere; the point is (task-1 accuracy, task-0 accuracy) of
  that routed pair, over all task-1 and all task-0 probes;
- the gated model's task-0 accuracy at the control's task-1 accuracy: each of its runs
  (`task1_scale-preserve+gate-max-prob-0.8-0.05-above_lr{0.001,0.003}.json`, and for seed 1234
  `..._lr0.0003.json`, run on 2026-11-29; `--gated-lrs` restricts them),
  `result.accuracy.{task1,task0}` along training) read with the frontier's `cell_at`
  (megatron_scale/reports/frontier.py: linear between the two evaluations that bracket the level,
  best over crossings), then the best over the LRs; a point that neither gated curve reaches
  is skipped and listed;
- their difference (gated - control).
Then per seed the mean difference over its points, over seeds the mean [min, max] of those
per-seed means, and the min and max over single points. Every control point lies at task 1
0.78-0.90, so restricting levels to the frontier's 0.5-0.95 changes nothing. The gated 1e-3 run
alone (the notes' "gated Preserve (1e-3)") gives the same summary to three decimals; it is
printed too.

    .venv/bin/python results/2026-11-28-biography-frontier-v2/runs/gate_control.py [FOLDER] [--full-lrs LR ...]

FOLDER: the frontier's folder (default: this script's parent folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from megatron_scale.reports.frontier import Point, cell_at

SEEDS = (1234, 1235, 1236)
# the six LRs of 2026-11-28 (the notes' +0.009); 3e-06 was added on 2026-11-29 (+0.010, notes.md)
FULL_LRS = ("3e-06", "1e-05", "3e-05", "0.0001", "0.0003", "0.001", "0.003")
GATED = "task1_scale-preserve+gate-max-prob-0.8-0.05-above_lr{}.json"
TAU = 0.8


def result(path: Path) -> dict:
    with path.open(encoding="utf-8") as f:
        return json.load(f)["result"]


def routed_accuracy(records: dict[str, list]) -> float:
    """Accuracy with z_p where its max-prob >= TAU, else z_a."""
    picks = [p if m >= TAU else a
             for p, a, m in zip(records["correct_p"], records["correct_a"], records["stat/max-prob"], strict=True)]
    return sum(float(c) for c in picks) / len(picks)


def control_point(path: Path) -> Point:
    final = result(path)["final_records"]
    return routed_accuracy(final["task1"]), routed_accuracy(final["task0"])


def gated_curve(path: Path) -> list[Point]:
    acc = result(path)["accuracy"]
    return list(zip(acc["task1"], acc["task0"], strict=True))


def gated_at(curves: dict[str, list[Point]], level: float) -> tuple[float, str] | None:
    """The best task-0 accuracy over the gated runs at task-1 `level`, and its LR; None: unreached."""
    cells = [(c.value, lr) for lr, curve in curves.items() if (c := cell_at(curve, level)) is not None]
    return max(cells) if cells else None


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):+.3f} [{min(values):+.3f}, {max(values):+.3f}]"


def gated_lrs(stages: Path) -> list[str]:
    """The LRs of the gated stages in a seed's folder (1e-3 and 3e-3; seed 1234 also 3e-4, 2026-11-29)."""
    prefix, suffix = GATED.split("{}")
    return sorted((p.name.removeprefix(prefix).removesuffix(suffix) for p in stages.glob(GATED.format("*"))), key=float)


def main(folder: Path, full_lrs: tuple[str, ...] = FULL_LRS, only: tuple[str, ...] | None = None) -> None:
    print("| seed | full-FT LR | control task 1 | control task 0 | gated task 0 (LR) | gated - control |")
    print("|---|---|---|---|---|---|")
    diffs: dict[int, list[float]] = {}
    diffs_1e3: dict[int, list[float]] = {}
    skipped: list[str] = []
    for seed in SEEDS:
        stages = folder / f"seed{seed}" / "stages"
        curves = {lr: gated_curve(stages / GATED.format(lr)) for lr in gated_lrs(stages) if only is None or lr in only}
        for lr in full_lrs:
            t1, t0 = control_point(stages / f"task1_full_lr{lr}.json")
            best = gated_at(curves, t1)
            if best is None:
                skipped.append(f"seed {seed} lr {lr} (task 1 {t1:.3f})")
                continue
            value, gated_lr = best
            diffs.setdefault(seed, []).append(value - t0)
            if (c := cell_at(curves["0.001"], t1)) is not None:
                diffs_1e3.setdefault(seed, []).append(c.value - t0)
            print(f"| {seed} | {float(lr):g} | {t1:.3f} | {t0:.3f} | {value:.3f} ({float(gated_lr):g}) | {value - t0:+.3f} |")
    print()
    lrs = ", ".join(f"{float(lr):g}" for lr in sorted({lr for s in SEEDS for lr in gated_lrs(folder / f"seed{s}" / "stages")
                                                        if only is None or lr in only}, key=float))
    for name, d in ((f"best of the gated runs ({lrs}; each seed's own)", diffs), ("the gated 1e-3 alone", diffs_1e3)):
        means = [statistics.fmean(v) for v in d.values()]
        singles = [x for v in d.values() for x in v]
        per_seed = ", ".join(f"{s} {m:+.4f} ({len(d[s])})" for s, m in zip(d, means))
        print(f"- {name}: per-seed means (points) {per_seed}; over seeds {spread(means)}; "
              f"single points {min(singles):+.3f} to {max(singles):+.3f} ({len(singles)} points)")
    print(f"- skipped (task-1 accuracy outside every gated curve): {', '.join(skipped) or 'none'}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--full-lrs", nargs="+", default=FULL_LRS,
                    help="the full-fine-tuning stages' LRs, as in their file names (default: all seven)")
    ap.add_argument("--gated-lrs", nargs="+", default=None,
                    help="the gated stages' LRs to take the best of (default: every one in the seed's folder; "
                         "0.001 0.003 gives the figure of before 3e-4 ran)")
    a = ap.parse_args()
    main(a.folder, tuple(a.full_lrs), None if a.gated_lrs is None else tuple(a.gated_lrs))

#!/usr/bin/env python3
"""Size the science run's trainings from a measured rate (tools/gpu_run.sh science, phase plan).

    python tools/gpu_run_plan.py --metrics CAL/runs/full/metrics.jsonl --seconds 300 --waves 2 \\
        --methods-per-wave 4 --tokens-per-iter 32768 --out plan.env

Reads the calibration run's training records (megatron_scale.train --metrics-file: one JSON
object per iteration with `tokens_per_s`), takes the median rate after the first iterations
(start-up and first-call compilation), and writes a shell file of the settings the waves run
with: TRAIN_ITERS for each method so that a wave's methods, one after another, train for
--train-share of --seconds (the rest goes to conversion, evaluations, the router sweep and the
benchmarks), EVAL_INTERVAL (four evaluations along training), SAVE_INTERVAL, WAVE_SECONDS (the
wave's time limit: there each run stops and saves) and TOKENS_PER_S. Two waves share one GPU:
--share is each one's assumed part of the measured single-run rate (an assumption until a GPU
measures it; the runs stop on their limit whatever it is). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path


def rate(metrics: Path, skip: int = 2) -> float:
    """Median tokens/s of the training records after the first `skip` (all, when there are no more)."""
    if not metrics.is_file():
        raise SystemExit(f"gpu_run_plan: --metrics {metrics}: no such file (did the calibration train?)")
    rows = []
    for line in metrics.read_text().splitlines():
        rec = json.loads(line)
        if "tokens_per_s" in rec:
            rows.append(float(rec["tokens_per_s"]))
    if not rows:
        raise SystemExit(f"gpu_run_plan: --metrics {metrics}: no training record with tokens_per_s")
    return statistics.median(rows[skip:] or rows)


def plan(tokens_per_s: float, *, seconds: float, methods_per_wave: int, tokens_per_iter: int, share: float,
         train_share: float, min_iters: int, max_iters: int) -> dict[str, int | float]:
    train_s = seconds * train_share / methods_per_wave
    iters = int(tokens_per_s * share * train_s // tokens_per_iter)
    iters = max(min_iters, min(max_iters, iters))
    return {"TRAIN_ITERS": iters, "EVAL_INTERVAL": max(1, iters // 4), "SAVE_INTERVAL": iters,
            "LOG_INTERVAL": max(1, iters // 20), "WAVE_SECONDS": int(seconds), "TOKENS_PER_S": round(tokens_per_s, 1),
            "TOKENS_PER_RUN": iters * tokens_per_iter}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics", type=Path, required=True, help="the calibration run's metrics.jsonl")
    ap.add_argument("--seconds", type=float, required=True, help="each wave's time limit")
    ap.add_argument("--waves", type=int, default=2, help="waves side by side on the GPU")
    ap.add_argument("--methods-per-wave", type=int, default=4)
    ap.add_argument("--tokens-per-iter", type=int, required=True, help="GLOBAL_BATCH x SEQ_LENGTH")
    ap.add_argument("--share", type=float, default=None,
                    help="each wave's part of the single-run rate (default 0.6 with two waves, else 1)")
    ap.add_argument("--train-share", type=float, default=0.6, help="part of a wave spent training")
    ap.add_argument("--min-iters", type=int, default=20)
    ap.add_argument("--max-iters", type=int, default=100_000)
    ap.add_argument("--out", type=Path, required=True, help="shell file of KEY=VALUE lines")
    a = ap.parse_args(argv)
    for name in ("seconds", "tokens_per_iter", "waves", "methods_per_wave"):
        if getattr(a, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    share = a.share if a.share is not None else (0.6 if a.waves == 2 else 1.0 / a.waves)
    measured = rate(a.metrics)
    p = plan(measured, seconds=a.seconds, methods_per_wave=a.methods_per_wave, tokens_per_iter=a.tokens_per_iter,
             share=share, train_share=a.train_share, min_iters=a.min_iters, max_iters=a.max_iters)
    tmp = a.out.with_name(a.out.name + ".tmp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in p.items()))
    os.replace(tmp, a.out)
    print(json.dumps({"measured_tokens_per_s": measured, "share": share, **p}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

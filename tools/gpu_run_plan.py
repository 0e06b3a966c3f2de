#!/usr/bin/env python3
"""Fix the science run's budget before any run starts (tools/gpu_run.sh science, phase plan).

    python tools/gpu_run_plan.py --metrics CAL/runs/full/metrics.jsonl --seconds 300 --waves 2 \\
        --core-per-wave 2 --optional-per-wave 1 --tokens-per-iter 16384 --min-tokens 4000000 \\
        --levels 0.05 0.1 0.2 0.3 0.4 --out plan.env

Reads the calibration run's training records (megatron_scale.train --metrics-file: one JSON
object per iteration with `tokens_per_s`), takes the median rate after the first iterations
(start-up and first-call compilation), and decides, from that rate alone:

- which methods run: each wave runs its --core-per-wave methods one after another, and its
  --optional-per-wave ones too (LoRA and Freeze in the science run) only where every run then
  still gets --min-tokens (the gate: INCLUDE_OPTIONAL);
- each run's time limit (METHOD_SECONDS: --seconds over the wave's methods; there each run stops
  and saves) and its iterations (TRAIN_ITERS: --train-share of that time at --share of the
  measured rate, two waves sharing one GPU), so its tokens (TOKENS_PER_RUN);
- where the runs evaluate (EVAL_ITERATIONS: 0, then every doubling of the tokens seen from
  --first-eval-tokens, and the last iteration) and the frontier's learning levels (LEVELS).

Writes them as a shell file (KEY=VALUE lines, lists quoted) and the same as JSON beside it
(plan.json); prints the JSON. --share is an assumption until a GPU measures it; the runs stop on
their limit whatever it is. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
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


def doublings(iters: int, tokens_per_iter: int, first_tokens: int) -> list[int]:
    """0, the iterations where the tokens seen first reach first_tokens x 2^k (k = 0, 1, ...), and `iters`."""
    out, tokens = {0, iters}, first_tokens
    while (it := math.ceil(tokens / tokens_per_iter)) < iters:
        out.add(it)
        tokens *= 2
    return sorted(out)


def plan(tokens_per_s: float, *, seconds: float, core: int, optional: int, tokens_per_iter: int, share: float,
         train_share: float, min_tokens: int, min_iters: int, max_iters: int, first_eval_tokens: int,
         levels: list[float]) -> dict[str, object]:
    def sized(per_wave: int) -> tuple[int, int]:
        method_s = seconds / per_wave
        iters = int(tokens_per_s * share * method_s * train_share // tokens_per_iter)
        return max(min_iters, min(max_iters, iters)), int(method_s)

    with_optional = sized(core + optional)
    include = optional > 0 and with_optional[0] * tokens_per_iter >= min_tokens
    iters, method_s = with_optional if include else sized(core)
    return {"TRAIN_ITERS": iters, "EVAL_ITERATIONS": doublings(iters, tokens_per_iter, first_eval_tokens),
            "SAVE_INTERVAL": iters, "LOG_INTERVAL": max(1, iters // 20), "METHOD_SECONDS": method_s,
            "WAVE_SECONDS": int(seconds), "INCLUDE_OPTIONAL": int(include),
            "METHODS_PER_WAVE": core + (optional if include else 0), "TOKENS_PER_S": round(tokens_per_s, 1),
            "TOKENS_PER_ITER": tokens_per_iter, "TOKENS_PER_RUN": iters * tokens_per_iter, "MIN_TOKENS": min_tokens,
            "MEETS_MIN_TOKENS": int(iters * tokens_per_iter >= min_tokens), "LEVELS": levels}


def shell(p: dict[str, object]) -> str:
    return "".join(f"{k}=\"{' '.join(map(str, v))}\"\n" if isinstance(v, list) else f"{k}={v}\n" for k, v in p.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics", type=Path, required=True, help="the calibration run's metrics.jsonl")
    ap.add_argument("--seconds", type=float, required=True, help="each wave's time for training (its runs in turn)")
    ap.add_argument("--waves", type=int, default=2, help="waves side by side on the GPU")
    ap.add_argument("--core-per-wave", type=int, default=2, help="methods each wave always runs")
    ap.add_argument("--optional-per-wave", type=int, default=0,
                    help="methods each wave runs too where every run still gets --min-tokens")
    ap.add_argument("--methods-per-wave", type=int, default=None, help="(the older name of --core-per-wave)")
    ap.add_argument("--tokens-per-iter", type=int, required=True, help="GLOBAL_BATCH x SEQ_LENGTH")
    ap.add_argument("--share", type=float, default=None,
                    help="each wave's part of the single-run rate (default 0.6 with two waves, else 1 / waves)")
    ap.add_argument("--train-share", type=float, default=0.6, help="part of a run's time spent training")
    ap.add_argument("--min-tokens", type=int, default=0, help="the tokens every run should get (the optional methods' gate)")
    ap.add_argument("--first-eval-tokens", type=int, default=16384, help="the first evaluation after iteration 0, in tokens")
    ap.add_argument("--levels", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3, 0.4],
                    help="the frontier's learning levels (default 0.05 0.1 0.2 0.3 0.4)")
    ap.add_argument("--min-iters", type=int, default=20)
    ap.add_argument("--max-iters", type=int, default=100_000)
    ap.add_argument("--out", type=Path, required=True, help="shell file of KEY=VALUE lines (plan.json beside it)")
    a = ap.parse_args(argv)
    core = a.methods_per_wave if a.methods_per_wave is not None else a.core_per_wave
    for name, value in (("seconds", a.seconds), ("tokens-per-iter", a.tokens_per_iter), ("waves", a.waves),
                        ("core-per-wave", core), ("first-eval-tokens", a.first_eval_tokens)):
        if value <= 0:
            ap.error(f"--{name} must be positive")
    if a.optional_per_wave < 0 or a.min_iters < 1 or a.max_iters < a.min_iters:
        ap.error("--optional-per-wave must be >= 0, and 1 <= --min-iters <= --max-iters")
    if not all(0 < lv < 1 for lv in a.levels):
        ap.error(f"--levels: each a share of the base's bits per byte in (0, 1), got {a.levels}")
    share = a.share if a.share is not None else (0.6 if a.waves == 2 else 1.0 / a.waves)
    measured = rate(a.metrics)
    p = plan(measured, seconds=a.seconds, core=core, optional=a.optional_per_wave, tokens_per_iter=a.tokens_per_iter,
             share=share, train_share=a.train_share, min_tokens=a.min_tokens, min_iters=a.min_iters,
             max_iters=a.max_iters, first_eval_tokens=a.first_eval_tokens, levels=sorted(a.levels))
    doc = {"measured_tokens_per_s": measured, "share": share, "train_share": a.train_share, **p}
    for path, text in ((a.out, shell(p)), (a.out.with_name("plan.json"), json.dumps(doc) + "\n")):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

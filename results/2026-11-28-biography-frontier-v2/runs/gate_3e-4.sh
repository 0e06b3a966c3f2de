#!/usr/bin/env bash
# The gate below its lowest LR (issue 45): SCALE-Preserve through the max-prob gate (tau 0.8,
# T 0.05) at 3e-4, seed 1234, with the v2 evaluations and a 6,000-step cap (stop at task 1 0.95).
# A new OUT makes pretrain and task 0 again (equal to the committed stages, value for value); the
# stage file is then copied into seed1234/stages/ and the frontier rebuilt with --from-stages.
set -euo pipefail
: "${REPO:=/work/wt-r}" "${OUT:=/work/runs/bio/gate3e-4}"
cd "$REPO"
env OMP_NUM_THREADS=1 PYTHONPATH="$REPO" nice -n 19 /work/main/.venv/bin/python tools/biography_benchmark.py \
  --preset cpu --out "$OUT" --seeds 1234 --methods scale-preserve \
  --gate-statistic max-prob --gate-tau 0.8 --gate-temperature 0.05 \
  --task1-lrs 3e-4 --task1-iters 6000 --task1-stop-at 0.95 \
  --eval-interval 50 --eval-dense-until 200 --eval-dense-interval 10 --routed-baselines

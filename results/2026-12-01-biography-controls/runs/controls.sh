#!/usr/bin/env bash
# The biography controls of issue 61 (science-review-5 C5, C6), one stage at a time, at nice 19 on
# one OpenMP thread, with the v2 frontier's settings (CPU preset, evaluations every 50 steps and
# every 10 up to step 200, the routed baselines' records at the stop):
#   C5  full fine-tuning at 1e-5, 3e-5 and 1e-4, 3 seeds, stopped at task-1 accuracy 0.6, 0.9 and
#       1.0 (6,000-step cap): routed with the task-0 model they give the routed control at about
#       0.5, 0.8 and 0.95 routed task-1 accuracy, to set against the gate at the same level
#   C6  SCALE-Preserve through the max-prob gate at tau 0.7 and 0.9 (T 0.05), 1e-3, 3 seeds
#       (the committed frontier has tau 0.8 only, chosen on seed 1234's records), with the v2 gate
#       runs' 3,000-step cap (a later --task1-iters overrides the 6,000 of P)
# Order: stop 0.6, 0.9, the two taus, then stop 1.0 (the longest). Each stop level and each tau is its own OUT under ROOT; the first OUT pre-trains and learns task
# 0 (equal to the committed stages, value for value); the others start from copies of its
# pretrain and task-0 stages and checkpoints.
#   bash controls.sh        (REPO: the checkout whose code runs, default /work/wt-r)
set -euo pipefail
: "${ROOT:=/work/runs/bio}" "${REPO:=/work/wt-r}"
cd "$REPO"
P=(env OMP_NUM_THREADS=1 PYTHONPATH="$REPO" nice -n 19 /work/main/.venv/bin/python tools/biography_benchmark.py
   --preset cpu --seeds 1234 1235 1236 --eval-interval 50 --eval-dense-until 200 --eval-dense-interval 10
   --routed-baselines --task1-iters 6000)
seed_from() {  # OUT: its pretrain and task-0 stages, data and checkpoints from ROOT/stop0.6
  for s in 1234 1235 1236; do
    [ -f "$1/seed$s/stages/task0.json" ] && continue
    mkdir -p "$1/seed$s/stages" "$1/seed$s/checkpoints"
    cp -r "$ROOT/stop0.6/seed$s/data" "$1/seed$s/"
    cp "$ROOT/stop0.6/seed$s/stages/pretrain.json" "$ROOT/stop0.6/seed$s/stages/task0.json" "$1/seed$s/stages/"
    cp -r "$ROOT/stop0.6/seed$s/checkpoints/pretrain" "$ROOT/stop0.6/seed$s/checkpoints/task0" "$1/seed$s/checkpoints/"
  done
}
for stop in 0.6 0.9; do
  out=$ROOT/stop$stop
  [ "$stop" = 0.6 ] || seed_from "$out"
  "${P[@]}" --out "$out" --methods full --task1-lrs 1e-5 3e-5 1e-4 --task1-stop-at "$stop"
done
for tau in 0.7 0.9; do
  out=$ROOT/gate-tau$tau
  seed_from "$out"
  "${P[@]}" --out "$out" --methods scale-preserve --task1-lrs 1e-3 --task1-stop-at 0.95 --task1-iters 3000 \
    --gate-statistic max-prob --gate-tau "$tau" --gate-temperature 0.05
done
# C5's third level last: full fine-tuning to task-1 accuracy 1.0 takes the longest stages
stop=1.0 out=$ROOT/stop1.0
seed_from "$out"
"${P[@]}" --out "$out" --methods full --task1-lrs 1e-5 3e-5 1e-4 --task1-stop-at "$stop"

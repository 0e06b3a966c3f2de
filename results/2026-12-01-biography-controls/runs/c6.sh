#!/usr/bin/env bash
# C6 alone (science-review-5): SCALE-Preserve through the max-prob gate at tau 0.7 and 0.9
# (T 0.05), LR 1e-3, seeds 1234-1236, the v2 gate runs' 3,000-step cap and stop at 0.95, with
# controls.sh's settings. controls.sh's own C6 step copies the pre-trained and task-0 stages of
# ROOT/stop0.6, which a machine reset lost (2026-12-03); here the first tau's OUT pre-trains and
# learns task 0 itself (equal to the committed v2 stages, value for value: checked in the notes)
# and the second starts from copies of its stages and checkpoints.
#   ROOT=/work/runs/bio REPO=/work/wt-r bash c6.sh     (REPO: a worktree of main at 31ce121)
set -euo pipefail
: "${ROOT:=/work/runs/bio}" "${REPO:=/work/wt-r}"
cd "$REPO"
P=(env OMP_NUM_THREADS=1 PYTHONPATH="$REPO" nice -n 19 /work/main/.venv/bin/python tools/biography_benchmark.py
   --preset cpu --seeds 1234 1235 1236 --eval-interval 50 --eval-dense-until 200 --eval-dense-interval 10
   --routed-baselines --methods scale-preserve --task1-lrs 1e-3 --task1-stop-at 0.95 --task1-iters 3000
   --gate-statistic max-prob --gate-temperature 0.05)
first=$ROOT/gate-tau0.7
for tau in 0.7 0.9; do
  out=$ROOT/gate-tau$tau
  if [ "$out" != "$first" ]; then
    for s in 1234 1235 1236; do
      [ -f "$out/seed$s/stages/task0.json" ] && continue
      mkdir -p "$out/seed$s/stages" "$out/seed$s/checkpoints"
      cp -r "$first/seed$s/data" "$out/seed$s/"
      cp "$first/seed$s/stages/pretrain.json" "$first/seed$s/stages/task0.json" "$out/seed$s/stages/"
      cp -r "$first/seed$s/checkpoints/pretrain" "$first/seed$s/checkpoints/task0" "$out/seed$s/checkpoints/"
    done
  fi
  "${P[@]}" --out "$out" --gate-tau "$tau"
done

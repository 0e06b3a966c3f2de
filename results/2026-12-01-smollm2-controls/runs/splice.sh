#!/usr/bin/env bash
# C1, the vocabulary splice: for each full fine-tuning run saved along training (queue-a.txt's
# splice-* runs), the base's logits everywhere and the run's checkpoint's on Hangul's rows only,
# scored on the run's own evaluation windows (tools/vocab_splice.py). Writes
# HERE/fr/TAG/splice/runs/full-seed1234/metrics.jsonl, which frontier.sh reads as a run's.
#   bash splice.sh [TAG ...]      from the repository root; ROOT as run_one.sh's
set -euo pipefail
: "${ROOT:=/work/runs/smol}" "${PYTHON:=.venv/bin/python}"
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- splice-full1e-4 splice-full1e-5
for tag in "$@"; do
  w=$ROOT/fr/$tag
  OMP_NUM_THREADS=${THREADS:-1} nice -n 19 "$PYTHON" tools/vocab_splice.py --run "$w/runs/full-seed1234" \
    --base "$w/ckpt/base" --tokenizer "$ROOT/shared/models/smollm2-135m" --out "$here/fr/$tag/splice"
done

#!/usr/bin/env bash
# The three seeds of the Hangul rows at 3e-3 over 384 iterations (196,608 tokens), and width.sh's
# run, side by side, one OpenMP thread each on the 2-core machine (nice 19).
#   bash launch.sh [SEED ...]        (default 1234 1235 1236; WIDE=0 leaves out the wide run)
# They share ROOT/shared/data, so each starts only once the one before it trains (its
# metrics.jsonl): every WORKDIR re-makes the shared datasets in its data step, and three doing
# that at once removed each other's files (the first launch, 06:19 UTC; notes.md).
set -euo pipefail
: "${ROOT:=/work/runs/smol}" "${WIDE:=1}"
here=$(cd "$(dirname "$0")" && pwd)
ROWS=TRAIN_FLAGS_SCALE_PRESERVE=--scale-output-rows_hangul
LONG="TRAIN_ITERS=384 EVAL_ITERATIONS=0_2_4_8_16_32_64_96_128_160_192_256_320_384 SAVE_INTERVAL=384"
training() {  # TAG SEED: wait until that run trains, or has failed
  until [ -f "$ROOT/fr/$1/runs/scale-preserve-seed$2/metrics.jsonl" ] || grep -qs "FAILED: $1" "$ROOT/done.txt"; do
    sleep 15
  done
}
seeds=("${@:-1234}"); [ $# -gt 0 ] || seeds=(1234 1235 1236)
for seed in "${seeds[@]}"; do
  tag=rows3e-3-384-s$seed
  # shellcheck disable=SC2086
  ( THREADS=1 bash "$here/run_one.sh" "$tag" scale-preserve 3e-3 "$seed" $ROWS $LONG < /dev/null \
      || echo "FAILED: $tag" | tee -a "$ROOT/done.txt" ) &
  training "$tag" "$seed"
done
if [ "$WIDE" = 1 ]; then
  ( bash "$here/width.sh" || echo "FAILED: rows3e-3-wide-s1234" | tee -a "$ROOT/done.txt" ) &
fi
wait

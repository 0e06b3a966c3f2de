#!/usr/bin/env bash
# The Hangul rows at 3e-3 on a SCALE twice as wide (d' = d/2 = 288, h' = 6 heads in g' = 2 KV
# groups, f' = f/2 = 768, against the default d/4, 3 heads in 1 group, 384), 96 iterations, seed
# 1234, one OpenMP thread: does more new width let the rows learn more Korean at the same tokens?
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
THREADS=1 bash "$here/run_one.sh" rows3e-3-wide-s1234 scale-preserve 3e-3 1234 \
  TRAIN_FLAGS_SCALE_PRESERVE=--scale-output-rows_hangul \
  SCALE_FLAGS=--scale-init_svd_--scale-router-tau_0.9_--scale-hidden-up_288_--scale-heads-up_6_--scale-groups-up_2_--scale-ffn-up_768 \
  < /dev/null

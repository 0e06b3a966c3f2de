#!/usr/bin/env bash
# The runs of 2026-11-29, one at a time, in this order (each line: run_one.sh's arguments).
# touch ROOT/STOP to end after the running one.
set -uo pipefail
: "${ROOT:=/work/runs/smol}"
here=$(cd "$(dirname "$0")" && pwd)
while read -r line; do
  [ -z "$line" ] || [ "${line#\#}" != "$line" ] && continue
  [ -e "$ROOT/STOP" ] && break
  # shellcheck disable=SC2086
  bash "$here/run_one.sh" $line < /dev/null || echo "FAILED: $line" | tee -a "$ROOT/done.txt"
done < "$here/queue.txt"

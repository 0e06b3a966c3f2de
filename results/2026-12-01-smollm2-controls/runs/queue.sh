#!/usr/bin/env bash
# Runs the lines of a queue file one at a time (each line: run_one.sh's arguments).
#   bash queue.sh QUEUE_FILE        touch ROOT/STOP to end after the running one
set -uo pipefail
: "${ROOT:=/work/runs/smol}"
here=$(cd "$(dirname "$0")" && pwd)
while read -r line; do
  [ -z "$line" ] || [ "${line#\#}" != "$line" ] && continue
  [ -e "$ROOT/STOP" ] && break
  # shellcheck disable=SC2086
  bash "$here/run_one.sh" $line < /dev/null || echo "FAILED: $line" | tee -a "$ROOT/done.txt"
done < "$1"

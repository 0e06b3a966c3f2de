#!/usr/bin/env bash
# The SmolLM2 frontier with this folder's controls (issue 61: C1 the vocabulary splice, C2 the rows
# at minimal width, C3 full fine-tuning 1e-5 at seeds 1235 and 1236) beside v2's curves (--prior)
# and the 2026-11-29 LR grid's; C4 (full fine-tuning 1e-5 over 384 iterations) beside the rows' 384-iteration runs. bash frontier.sh [OUT] from the repository root; a control not run
# yet is skipped, saying so.
set -euo pipefail
OUT=${1:-results/2026-12-01-smollm2-controls}
: "${F:=$(dirname "$0")/fr}" "${PYTHON:=.venv/bin/python}"
G=results/2026-11-29-smollm2-lr-grid/runs/fr
runs=()
add() {  # NAME=FOLDER:METHOD:LR:SEED, FOLDER holding runs/*/metrics.jsonl
  local folder=${1#*=}; folder=${folder%%:*}
  compgen -G "$folder/runs/*/metrics.jsonl" > /dev/null || { echo "skip ${1%%=*} (not run)" >&2; return 0; }
  runs+=("$1")
}
add "full=$G/full1e-5:full:1e-5:1234"
add "full=$F/full1e-5-s1235:full:1e-5:1235"
add "full=$F/full1e-5-s1236:full:1e-5:1236"
add "vocab-splice-full=$F/splice-full1e-4/splice:full:1e-4:1234"
add "vocab-splice-full=$F/splice-full1e-5/splice:full:1e-5:1234"
add "scale-preserve-hangul-rows-min-width=$F/rows3e-3-min:scale-preserve:3e-3:1234"
# C4: full fine-tuning at 1e-5 over 384 iterations, at equal tokens with the rows' 384-iteration runs
add "full-384it=$F/full1e-5-384:full:1e-5:1234"
add "full-384it=$F/full1e-5-384-s1235:full:1e-5:1235"   # its second seed (2026-12-04)
R=results/2026-11-29-smollm2-rows-384/runs/fr
for s in 1234 1235 1236; do add "scale-preserve-hangul-rows-384it=$R/rows3e-3-384-s$s:scale-preserve:3e-3:$s"; done
"$PYTHON" tools/recipe_frontier.py --out "$OUT" --prior results/2026-11-28-smollm2-frontier-v2 \
  --old en en_modern en_passages --new ko --also-new ko_legal --levels 0.05 0.1 0.2 \
  --pair vocab-splice-full full --pair scale-preserve-hangul-rows vocab-splice-full \
  --pair scale-preserve-hangul-rows-min-width scale-preserve-hangul-rows \
  --pair scale-preserve-hangul-rows-384it full-384it --pair full-384it full -- "${runs[@]}"

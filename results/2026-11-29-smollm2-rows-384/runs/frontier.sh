#!/usr/bin/env bash
# The SmolLM2 frontier with this folder's runs beside every earlier one (--prior: the lr-grid
# folder's frontier.json, which holds v2's curves and its own). bash frontier.sh [OUT] from the
# repository root. Each run's metrics.jsonl is kept beside this script (runs/fr/TAG/runs/RUN/), so the
# tables recompute from the repository; F=/work/runs/smol/fr reads the WORKDIRs themselves. The wide
# run (width.sh) was stopped at iteration 32 for time and is not drawn (notes.md).
set -euo pipefail
OUT=${1:-results/2026-11-29-smollm2-rows-384}
: "${F:=$(dirname "$0")/fr}"
runs=()
for spec in "scale-preserve-hangul-rows-384it=rows3e-3-384-s1234:scale-preserve:3e-3:1234" \
            "scale-preserve-hangul-rows-384it=rows3e-3-384-s1235:scale-preserve:3e-3:1235" \
            "scale-preserve-hangul-rows-384it=rows3e-3-384-s1236:scale-preserve:3e-3:1236"; do
  name=${spec%%=*}=; spec=${spec#*=}; tag=${spec%%:*}
  compgen -G "$F/$tag/runs/*/metrics.jsonl" > /dev/null || { echo "skip $tag (not run)" >&2; continue; }
  runs+=("$name$F/$spec")
done
/work/main/.venv/bin/python tools/recipe_frontier.py --out "$OUT" --prior results/2026-11-29-smollm2-lr-grid \
  --old en en_modern en_passages --new ko --also-new ko_legal --levels 0.05 0.1 0.2 \
  --pair scale-preserve-hangul-rows-384it full --pair scale-preserve-hangul-rows-384it scale-preserve \
  --pair scale-preserve-hangul-rows-384it scale-preserve-hangul-rows -- "${runs[@]}"

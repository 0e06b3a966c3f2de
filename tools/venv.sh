#!/usr/bin/env bash
# The project's virtual environments; prints the chosen venv's python on stdout (progress goes to
# stderr).
#   tools/venv.sh            <repo>/.venv, shared by the demo (examples/scale_korean.sh) and the
#                            tests (tests/run.sh): exactly the releases of requirements/lock.txt and
#                            requirements/no-deps.txt (hash-checked, no resolver), then the project
#                            itself (editable, built with the lock's setuptools and pybind11). Made
#                            once, remade only when setup.py, pyproject.toml or the lock change.
#   tools/venv.sh --newest   <repo>/.venv-newest: the newest releases pyproject.toml's ranges allow,
#                            resolved anew on every call (no pip-config constraint applied), to find
#                            the next breaking release before users do (`bash tests/run.sh --newest`);
#                            prints each requirement's release resolved, locked and newest served
#   tools/venv.sh --python   only the Python 3.12 the venvs are made with
# Python 3.12 is python3.12, pyenv's, or PYTHON=... The lock is made by tools/lock.sh.
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

PIP=(-m pip install -q --disable-pip-version-check)
case "${1:-}" in
  --python) find_python; exit 0 ;;
  --newest)
    venv=.venv-newest
    echo "tools/venv.sh: installing the newest releases pyproject.toml allows into $PWD/$venv" >&2
    [ -x $venv/bin/python ] || "$(find_python)" -m venv $venv
    # PIP_CONSTRAINT=/dev/null: no constraint file from a pip config (a machine's cap on torch, say)
    # holds a release back; only pyproject.toml's ranges decide, as for a user's pip install -e .
    export PIP_CONSTRAINT=/dev/null
    $venv/bin/python "${PIP[@]}" --upgrade pip >&2
    $venv/bin/python "${PIP[@]}" --upgrade --upgrade-strategy eager -e '.[test]' >&2
    $venv/bin/python "${PIP[@]}" --upgrade --no-deps -r requirements/no-deps.in >&2
    $venv/bin/python tools/newest_report.py requirements/lock.txt requirements/no-deps.txt >&2
    echo "$PWD/$venv/bin/python"; exit 0 ;;
  "") ;;
  *) echo "tools/venv.sh: unknown argument '$1' (expected nothing, --newest or --python)" >&2; exit 2 ;;
esac

stamp=$(cat setup.py pyproject.toml requirements/lock.txt requirements/no-deps.txt | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.stamp 2>/dev/null)" != "$stamp" ]; then
  echo "tools/venv.sh: installing the locked releases and the project into $PWD/.venv (a few minutes, once)" >&2
  [ -x .venv/bin/python ] || "$(find_python)" -m venv .venv
  # Keep pip's byte-compilation: spawned test ranks run with -B (they inherit pytest's
  # dont_write_bytecode), so without .pyc files every rank would compile torch again.
  .venv/bin/python "${PIP[@]}" --no-deps --require-hashes -r requirements/lock.txt -r requirements/no-deps.txt >&2
  .venv/bin/python "${PIP[@]}" --no-deps --no-build-isolation -e . >&2
  echo "$stamp" > .venv/.stamp
fi
echo "$PWD/.venv/bin/python"

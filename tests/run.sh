#!/usr/bin/env bash
# The test command (README): make or reuse .venv (tools/venv.sh, shared with the demo), run pytest.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -k linear`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash tools/venv.sh)
# Two pytest workers, each taking whole files (module fixtures run once): most tests wait on
# spawned ranks' start-up, so two at a time use the 2 cores far better than one (measured on
# the 2-core CI machine: 993 s -> 647 s). PYTEST_WORKERS=0 runs them in one process.
exec "$PY" -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"

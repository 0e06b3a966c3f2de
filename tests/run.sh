#!/usr/bin/env bash
# The test command (README): make or reuse .venv (tools/venv.sh: the locked releases, shared with
# the demo), run pytest. Extra arguments go to pytest, e.g. `bash tests/run.sh -k linear`.
#   bash tests/run.sh --newest [pytest args]   the same suite in .venv-newest, on the newest
#                                              releases pyproject.toml's ranges allow (not CI's)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --newest ]; then
  shift
  PY=$(bash tools/venv.sh --newest)
else
  PY=$(bash tools/venv.sh)
fi
# Two pytest workers, each taking whole files (module fixtures run once): most tests wait on
# spawned ranks' start-up, so two at a time use the 2 cores far better than one (measured on
# the 2-core CI machine: 993 s -> 647 s). PYTEST_WORKERS=0 runs them in one process.
# --durations: the slowest tests close every run, so the suite's time (25 minutes at most on the 2-core
# machine) is watched where it is spent
# One OpenMP thread per process: the two workers and the ranks they spawn already outnumber the
# cores, and torch's default of a thread per core oversubscribed them (paired runs of two test files
# on the 2-core machine, under load: 135 -> 107 s and 99 -> 77 s). A test that wants more threads sets
# them itself (torch.set_num_threads).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$PY" -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --durations=25 "$@"

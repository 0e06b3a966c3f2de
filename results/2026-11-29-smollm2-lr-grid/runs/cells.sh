#!/usr/bin/env bash
# Each training run's own cells in a frontier.json (one run, not the best over LRs as frontier.md
# shows): retention at learning 0.05, 0.1 and 0.2, and the run's last (learning, retention).
# bash cells.sh [FRONTIER_JSON] from the repository root. (Until 2026-12-02 this was runs/cells.py,
# importing the package; tools/frontier_cells.py prints the same table, byte for byte.)
set -euo pipefail
# the table is the tool's stderr (its stdout: a JSON summary)
{ "${PYTHON:-.venv/bin/python}" tools/frontier_cells.py "${1:-results/2026-11-29-smollm2-lr-grid/frontier.json}" \
  > /dev/null; } 2>&1

#!/usr/bin/env bash
# The control for the gated SCALE-Preserve (notes.md, "The control for the gate"), from the committed
# stage files: tools/bio_routed_control.py routes the task-0 model and each fully fine-tuned model per
# probe by the gate's own rule (z_p where max-prob >= 0.8) and sets the gate's task-0 accuracy at the
# control's routed task-1 accuracy against it (reports/frontier.py cell_at, the best over the seed's
# gated LRs). Each figure is the table's "every control" row: per-seed means, then mean [min, max]
# over seeds, and the single points. bash gate_control.sh [FOLDER] from the repository root.
# (Until 2026-12-02 this was runs/gate_control.py, the same computation importing the package; the
# tool gives the same numbers to every printed digit.)
set -euo pipefail
FOLDER=${1:-results/2026-11-28-biography-frontier-v2}
PY=${PYTHON:-.venv/bin/python}
# the tables are the tool's stderr (its stdout: a JSON summary)
run() { echo "== $*"; { "$PY" tools/bio_routed_control.py "$FOLDER" "$@" > /dev/null; } 2>&1 | grep "^| every control |"; }
run                                              # best of the gated runs, seven full-FT LRs: +0.011 [+0.005, +0.019]
run --gate-lrs 0.001 0.003                       # before seed 1234's 3e-4 gate ran: +0.010 [+0.005, +0.018]
run --lrs 1e-5 3e-5 1e-4 3e-4 1e-3 3e-3 --gate-lrs 0.001 0.003  # 2026-11-28's figure (six full-FT LRs,
                                                 # before 3e-6 and the 3e-4 gate): +0.009 [+0.003, +0.019]
run --gate-lrs 0.001                             # the gated 1e-3 alone: +0.009 [+0.004, +0.018]

#!/usr/bin/env python3
"""The gated SCALE-Preserve against the routed control on the biographies, at matched task-1
levels (science review 5, C5): the task-0 model and a fully fine-tuned model, each probe answered
by the task-0 model where its statistic passes the gate's own rule, set against the gate's task-0
accuracy at the control's routed task-1 accuracy; per seed, per control run, and as mean [min, max].

    python tools/bio_routed_control.py results/2026-11-28-biography-frontier-v2 --good-lrs 1e-5 3e-5 1e-4
    python tools/bio_routed_control.py GATES --controls STOP06 STOP09 STOP10 --out results/F/control

GATE_FOLDER holds the gated runs (tools/biography_benchmark.py --out: seed<N>/stages/
task1_<method>+gate-..._lr<LR>.json; each gate variant is set against controls routed by its own
statistic, direction and tau); --controls the folders of the full fine-tuning stages (default:
GATE_FOLDER), e.g. one per --task1-stop-at level. Prints the tables; --out writes
routed_control.json and routed_control.md there, atomically. The work is
megatron_scale/reports/bio_control.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from megatron_scale.cli import run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("gates", metavar="GATE_FOLDER", help="the folder of the gated runs' stage files")
    p.add_argument("--controls", nargs="+", default=[], metavar="FOLDER",
                   help="folders of the control's stage files (default: GATE_FOLDER)")
    p.add_argument("--method", default="full", help="the control's trained model (default full)")
    p.add_argument("--lrs", type=float, nargs="+", default=None, help="the control runs' LRs to use (default: all)")
    p.add_argument("--good-lrs", type=float, nargs="+", default=[],
                   help="also summarise over these control LRs alone (e.g. full fine-tuning's good ones)")
    p.add_argument("--gate-lrs", type=float, nargs="+", default=None,
                   help="the gated runs' LRs to take the best of (default: all)")
    p.add_argument("--tags", nargs="+", default=None, help="the gate variants (default: every +gate-... tag found)")
    p.add_argument("--out", default=None, help="folder for routed_control.json and routed_control.md")
    a = p.parse_args(argv)
    from megatron_scale.durable import atomic_write
    from megatron_scale.reports.bio_control import routed_control

    def work() -> dict:
        got = routed_control(a.gates, a.controls, method=a.method, lrs=a.lrs, tags=a.tags, good_lrs=a.good_lrs,
                             gate_lrs=a.gate_lrs)
        md = "\n".join(v["markdown"] for v in got.values())
        print(md, file=sys.stderr)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            doc = {"gates": a.gates, "controls": a.controls or [a.gates], **got}
            atomic_write(os.path.join(a.out, "routed_control.json"), json.dumps(doc, indent=1) + "\n")
            atomic_write(os.path.join(a.out, "routed_control.md"), md)
        return {tag: {k: v["summary"]["levels"][k] for k in v["summary"]["levels"]} for tag, v in got.items()}

    return run_tool(work, (ValueError, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())

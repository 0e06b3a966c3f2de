#!/usr/bin/env python3
"""SCALE-Route at every threshold from one pass over an old-domain and a new-domain eval set.

    python tools/route_sweep.py --load ckpt/scale-route --old-data en=data/en_text_document \
        --new-data ko=data/ko_text_document --seq-length 512 --samples 32 --out runs/sweep
    # pick the direction and tau keeping >= 95% of English tokens on z_p (held-out sets), write them
    # as the default:
    python tools/route_sweep.py ... --keep-old 0.95 --min-new-adapt 0.5 --calibrate-with max-prob \
        --calibration-old-data data/en_heldout --calibration-new-data data/ko_heldout --save ckpt/calibrated
    # or held-out windows of the same sets: calibrate on windows 32..63, evaluate on 0..31
    python tools/route_sweep.py ... --samples 32 --keep-old 0.95 --calibration-old-data data/en_text_document \
        --calibration-new-data data/ko_text_document --calibration-skip 32

Per router statistic (cosine, the paper's, and centered-cosine, max-prob, certainty): the routed
perplexity of both sets at every tau of a grid, z_p alone and z_a alone, the ROC/AUC of the router
as an old-vs-new token classifier, and the calibrated tau when asked. Each statistic is read in a
direction: "above" keeps z_p where it is >= tau (the paper's), "below" where it is <= tau; the
calibration picks the one sending more new-domain tokens to z_a (--direction imposes one).
Writes OUT/sweep.json and OUT/sweep.png; prints a JSON summary. All the work is in megatron_scale.evaluation.route_sweep.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import TYPE_CHECKING

from megatron_scale.cli import name_value, run_tool
from megatron_scale.route_stats.statistics import STATISTICS

if TYPE_CHECKING:  # imported lazily at run time: the tool's --help stays light
    from megatron_scale.evaluation.route_sweep import SweepSettings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", required=True, help="SCALE checkpoint (any variant: both heads exist)")
    p.add_argument("--old-data", required=True, type=name_value("--old-data", "PREFIX"), help="NAME=PREFIX of the old domain")
    p.add_argument("--new-data", required=True, type=name_value("--new-data", "PREFIX"), help="NAME=PREFIX of the new domain")
    p.add_argument("--out", required=True, help="folder for sweep.json and sweep.png")
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--samples", type=int, default=16, help="windows per set (first ones, in order)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--statistics", nargs="+", default=list(STATISTICS), choices=STATISTICS)
    p.add_argument("--taus", nargs="+", type=float, default=None, help="grid (default: quantiles of each statistic)")
    p.add_argument("--keep-old", type=float, default=None,
                   help="calibrate: keep at least this share of old-domain tokens on z_p")
    p.add_argument("--min-new-adapt", type=float, default=None,
                   help="calibrate: and send at least this share of new-domain tokens to z_a (else: unreachable)")
    p.add_argument("--calibrate-with", choices=STATISTICS, default="cosine", help="statistic whose tau is calibrated")
    p.add_argument("--direction", choices=("auto", "above", "below"), default="auto",
                   help="which side of tau keeps z_p: above (>=, the paper's) or below (<=); auto: the calibration "
                        "chooses per statistic (without --keep-old: the side with AUC >= 0.5)")
    p.add_argument("--route-units", nargs="+", choices=("token", "char", "word"), default=["token"],
                   help="decide per token (the paper's), per UTF-8 character or per whitespace word (one decision "
                        "from the pooled statistic of its tokens); the first is the sweep's, the others are "
                        "summarised beside it (by_unit), from the same pass")
    p.add_argument("--route-pool", choices=("mean", "first"), default="mean",
                   help="a unit's statistic: the mean over its tokens (evaluation only) or its first token's (causal)")
    p.add_argument("--tokenizer", default=None,
                   help="the byte-level BPE tokenizer.json (or folder) of the data: --route-units char/word need it")
    p.add_argument("--calibration-old-data", default=None, help="held-out old-domain PREFIX (default: --old-data)")
    p.add_argument("--calibration-new-data", default=None, help="held-out new-domain PREFIX (default: --new-data)")
    p.add_argument("--calibration-skip", type=int, default=0,
                   help="calibration windows start after this many (--samples with the evaluated sets' own "
                        "prefixes: disjoint held-out windows of one set)")
    p.add_argument("--save", default=None, help="write the checkpoint again with the calibrated tau as its default")
    return p


def settings_of(a: argparse.Namespace) -> SweepSettings:
    """The parsed flags as the runner's SweepSettings (what sweep.json records under "settings")."""
    from megatron_scale.evaluation.route_sweep import SweepSettings

    return SweepSettings(
        load=a.load, old=a.old_data, new=a.new_data, out=a.out, seq_length=a.seq_length, samples=a.samples,
        batch_size=a.batch_size, tp=a.tensor_model_parallel_size, statistics=tuple(a.statistics),
        taus=tuple(a.taus) if a.taus else None, keep_old=a.keep_old, min_new_adapt=a.min_new_adapt,
        calibrate_with=a.calibrate_with, direction=a.direction, units=tuple(a.route_units), pool=a.route_pool,
        tokenizer=a.tokenizer, calibration_old=a.calibration_old_data,
        calibration_new=a.calibration_new_data, calibration_skip=a.calibration_skip, save=a.save,
    )


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.checkpoint import CheckpointError
    from megatron_scale.route_eval.calibrate import CalibrationError
    from megatron_scale.evaluation.route_sweep import run_sweep

    settings = settings_of(a)

    def work() -> dict:
        summary = run_sweep(settings)
        if "calibration" in summary:
            print(summary["calibration"]["message"], file=sys.stderr)
        return summary

    return run_tool(work, (ValueError, CheckpointError, CalibrationError))


if __name__ == "__main__":
    sys.exit(main())

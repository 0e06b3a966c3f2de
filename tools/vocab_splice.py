#!/usr/bin/env python3
"""The vocabulary-splice control of a training run (science review 5, C1): the base's logits
everywhere, each saved checkpoint's on one script's rows only (the rows `--scale-output-rows`
trains), scored on the run's own evaluation windows; a metrics.jsonl the frontier reads as a run's.

    python tools/vocab_splice.py --run WORKDIR/runs/full-seed1234 --base WORKDIR/ckpt/base \\
        --tokenizer WORKDIR/models/smollm2-135m --out runs/splice/full1e-4
    python tools/recipe_frontier.py --out results/F --old en en_modern en_passages --new ko \\
        --also-new ko_legal vocab-splice-full-1e-4=runs/splice/full1e-4:full:1e-4:1234 ...

--run is a training run's --save folder (its metrics.jsonl and iter_* checkpoints: train with
SAVE_ITERATIONS), --base the checkpoint it started from (the recipe's WORKDIR/ckpt/base). Writes
OUT/runs/<run's folder name>/metrics.jsonl: the run's start record, then per set an eval/<set>
record at iteration 0 (the base) and at each checkpoint's iteration, with the spliced lm_loss,
the checkpoint's own (tuned_lm_loss), the run's evaluation there (run_lm_loss) and the share of
targets that are rows. The base's and each checkpoint's own losses must equal the run's
evaluations to 1e-4 (relative), or it stops naming the file. The work is
megatron_scale/evaluation/splice.py.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from megatron_scale.cli import run_tool


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a training run's --save folder (metrics.jsonl, iter_* checkpoints)")
    p.add_argument("--base", required=True, help="the checkpoint the run started from (the recipe's WORKDIR/ckpt/base)")
    p.add_argument("--tokenizer", required=True, help="the run's byte-level tokenizer (a folder holding tokenizer.json)")
    p.add_argument("--out", required=True, help="the folder to write runs/<run>/metrics.jsonl under")
    p.add_argument("--script", default="hangul", help="whose rows are spliced (--scale-output-rows' scripts; default hangul)")
    p.add_argument("--iterations", type=int, nargs="+", default=None,
                   help="the checkpoints to splice (default: every iter_* the run saved)")
    p.add_argument("--batch-size", type=int, default=2, help="windows per forward (default 2)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.evaluation.splice import splice_run

    def work() -> dict:
        if a.batch_size < 1:
            raise ValueError(f"--batch-size: must be at least 1, got {a.batch_size}")
        return splice_run(a.run, a.base, a.tokenizer, a.out, script=a.script, iterations=a.iterations,
                          batch_size=a.batch_size, say=lambda s: print(s, file=sys.stderr, flush=True))

    return run_tool(work, (ValueError, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The Naver sentiment movie corpus (NSMC, CC0 1.0) split by movie into Korean training text,
held-out text and a balanced sentiment benchmark, in one command:

    python tools/prepare_nsmc.py --input /work/shared/data/nsmc/reviews.jsonl.zst --out data/nsmc
    python tools/prepare_nsmc.py --input nsmc/raw --out data/nsmc     # a clone of github.com/e9t/nsmc

--input is the JSON Lines of the reviews (plain, .gz or .zst) or the corpus's raw/ folder of
per-movie JSON lists. Writes OUT/train.jsonl, OUT/heldout.jsonl (a movie's reviews a document),
OUT/bench.jsonl (a review a line, its label and dev/test part) and OUT/splits.json (seed, movie
ids of each split, counts, sha256 of the input and of each output), and prints a JSON summary.
Next: tools/preprocess_data.py on train.jsonl and heldout.jsonl, NSMC_DIR=OUT for the `nsmc`
benchmark of tools/eval_benchmarks.py (docs/evaluation.md, "NSMC"). All the work is in
megatron_scale.data.nsmc_prepare.
"""

from __future__ import annotations

import argparse
import sys

from megatron_scale.cli import run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="reviews.jsonl[.zst|.gz], or a raw/ folder of <movie_id>.json")
    p.add_argument("--out", required=True, help="folder to write (made if missing; its four files are replaced)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the movie split and the benchmark draw (default 1234)")
    args = p.parse_args(argv)
    from megatron_scale.data.nsmc_prepare import prepare_nsmc
    from megatron_scale.data.nsmc_split import SplitConfig

    return run_tool(lambda: prepare_nsmc(args.input, args.out, SplitConfig(seed=args.seed)), (ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Per-token route records of a SCALE checkpoint on several held-out sets, in one file: the input of
every router sweep and control of that checkpoint (made by megatron_scale/evaluation/route_records.py,
kept by megatron_scale/route_eval/stored.py).

    python tools/route_records.py --load runs/fr/runs/scale-preserve-seed1234/iter_0000016 \\
        --data en=data/en_eval_text_document ko=data/ko_eval_text_document \\
        --calibration en ko --seq-length 256 --samples 16 --out records/iter_0000016.safetensors

Each --data set gives the --samples windows training evaluates on it (megatron-core's GPTDataset
drawn with --eval-seed, data/batches.py: with --samples = --eval-iters x --global-batch-size, the
very windows of the run's evaluations, so the records' z_a is the run's own evaluation); each
--calibration set (one of --data) gives the next --samples windows of the same order too, as
"cal/NAME": held out from the evaluated ones (a tau calibrated there is a deployable router). Any SCALE checkpoint works: a SCALE-Preserve checkpoint's records are
SCALE-Route's at that point of training, since Route trains bitwise like Preserve.
Prints a JSON summary (tokens per set, each head's perplexity).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

from megatron_scale.cli import name_value, run_tool


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", required=True, help="a SCALE checkpoint (iter_* directory, or a run's --save: its newest)")
    p.add_argument("--data", required=True, nargs="+", type=name_value("--data", "PREFIX"), help="NAME=PREFIX ...")
    p.add_argument("--calibration", nargs="*", default=[], metavar="NAME",
                   help="sets of --data whose next --samples windows are kept too, as cal/NAME")
    p.add_argument("--eval-seed", type=int, default=1234, help="training's --eval-seed (default 1234, training's default)")
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--samples", type=int, default=16, help="windows per set (default 16)")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--alphas", type=float, nargs="*", default=None,
                   help="weights of z_p + alpha (z_a - z_p) to score (default 0, 0.05, ..., 1; none given: none)")
    p.add_argument("--tokenizer", default=None, help="the data's tokenizer (recorded: per-character pooling needs it)")
    p.add_argument("--out", required=True, help="the records file (.safetensors) to write")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.checkpoint import latest_iteration_dir
    from megatron_scale.convert import ConversionError
    from megatron_scale.evaluation.route_records import Windows, collect_sets
    from megatron_scale.route_eval import stored

    def work() -> dict:
        data = dict(a.data)
        if len(data) != len(a.data):
            raise ValueError("--data: a set named twice")
        unknown = [n for n in a.calibration if n not in data]
        if unknown:
            raise ValueError(f"--calibration {unknown}: not among --data's sets {sorted(data)}")
        for flag, v in (("--seq-length", a.seq_length), ("--samples", a.samples), ("--batch-size", a.batch_size)):
            if v < 1:
                raise ValueError(f"{flag}: must be at least 1, got {v}")
        if a.alphas is not None and not all(0.0 <= x <= 1.0 for x in a.alphas):
            raise ValueError(f"--alphas: each must lie in [0, 1], got {a.alphas}")
        load = Path(a.load)
        if not load.is_dir():
            raise ValueError(f"--load: checkpoint directory {load} does not exist")
        load = latest_iteration_dir(load) or load
        sets = {n: Windows(p) for n, p in data.items()}
        sets |= {f"cal/{n}": Windows(data[n], a.samples) for n in a.calibration}
        records = collect_sets(str(load), sets, seq_length=a.seq_length, samples=a.samples,
                               batch_size=a.batch_size, alphas=a.alphas, seed=a.eval_seed)
        meta = {"load": str(load), "sets": {n: {"prefix": w.prefix, "skip": w.skip} for n, w in sets.items()},
                "seq_length": a.seq_length, "samples": a.samples, "eval_seed": a.eval_seed, "tokenizer": a.tokenizer,
                "unit": "token"}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        stored.save(a.out, records, meta)
        heads = {n: {h: math.exp(float(r[f"loss_{h[-1]}"].double().mean())) for h in ("z_p", "z_a")}
                 for n, r in records.items()}
        return {"out": a.out, "load": str(load), "tokens": {n: int(r["loss_p"].numel()) for n, r in records.items()},
                "ppl": heads}

    return run_tool(work, (ValueError, ConversionError))


if __name__ == "__main__":
    sys.exit(main())

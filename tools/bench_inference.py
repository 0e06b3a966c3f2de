#!/usr/bin/env python3
"""What serving each export costs: generate() tokens/s and per-token latency beside the FLOPs
multiplied per token, for the base model's export, the SCALE export and the fused view (any
Hugging Face folders; the first is the reference of the ratios). Prints a Markdown table and
writes the JSON (megatron_scale/convert/inference_cost.py says what each column is).

    python tools/convert_megatron_to_hf.py --load ckpt/base --save hf/base
    python tools/convert_megatron_to_hf.py --load ckpt/preserve --save hf/preserve
    python tools/convert_megatron_to_hf.py --load ckpt/preserve --save hf/preserve-fused --fused-view
    python tools/bench_inference.py --model base=hf/base --model scale=hf/preserve \
        --model fused=hf/preserve-fused --out results/inference.json

Time on a quiet machine: on CPU, pin the threads (--threads) and run nothing beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from megatron_scale.durable import atomic_write
from megatron_scale.cli import name_value
from megatron_scale.convert.inference_cost import Shape, run, table

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", type=name_value("--model", "FOLDER"), required=True,
                   metavar="LABEL=FOLDER", help="a Hugging Face folder to time (repeat; the first is the reference)")
    p.add_argument("--out", required=True, help="JSON file to write (atomically)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU; default: torch's)")
    p.add_argument("--batch", type=int, default=Shape.batch, help="prompts per generate() call")
    p.add_argument("--prompt-tokens", type=int, default=Shape.prompt, help="prompt length (random ids)")
    p.add_argument("--new-tokens", type=int, default=Shape.new, help="tokens generated per call (>= 2)")
    p.add_argument("--repeats", type=int, default=Shape.repeats, help="timed calls per model; the median counts")
    p.add_argument("--cache", choices=("dynamic", "static"), default=Shape.cache, help="KV cache of generate()")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for label, folder in args.model:
        if not (Path(folder) / "config.json").is_file():
            print(f"error: --model {label}={folder}: no config.json there", file=sys.stderr)
            return 2
    for flag, value, least in (("--batch", args.batch, 1), ("--prompt-tokens", args.prompt_tokens, 1),
                               ("--new-tokens", args.new_tokens, 2), ("--repeats", args.repeats, 1)):
        if value < least:
            print(f"error: {flag} {value}: at least {least}", file=sys.stderr)
            return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    shape = Shape(batch=args.batch, prompt=args.prompt_tokens, new=args.new_tokens, repeats=args.repeats,
                  cache=args.cache)
    result = run(args.model, shape, DTYPES[args.dtype], torch.device(args.device))
    result["command"] = ["python", "tools/bench_inference.py", *(argv if argv is not None else sys.argv[1:])]
    atomic_write(args.out, json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Greedy continuations of English and Korean prompts by each Hugging Face model given.

    python tools/generate_samples.py --model base=models/smollm2-135m \
        --model scale-preserve=hf/scale-preserve --model full=hf/full --output report/

writes report/generations.json and report/generations.md and prints the JSON summary. The
prompts are megatron_scale.reports.samples.PROMPTS unless --prompt LANG=TEXT replaces them.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from megatron_scale.cli import name_value, run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, type=name_value("--model"), metavar="NAME=FOLDER")
    p.add_argument("--output", required=True, help="folder for generations.json and generations.md")
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--prompt", action="append", type=name_value("--prompt"), metavar="LANG=TEXT",
                   help="replaces the default prompts (repeat)")
    args = p.parse_args(argv)
    if args.new_tokens < 1:
        p.error(f"--new-tokens {args.new_tokens}: must be at least 1")
    warnings.filterwarnings("ignore")
    from megatron_scale.reports.samples import PROMPTS, write_samples

    prompts: dict[str, list[str]] = {}
    for lang, text in args.prompt or []:
        prompts.setdefault(lang, []).append(text)
    return run_tool(lambda: write_samples(dict(args.model), args.output, new_tokens=args.new_tokens,
                                          prompts=prompts or PROMPTS), (FileNotFoundError, OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())

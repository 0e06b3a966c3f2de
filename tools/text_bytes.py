#!/usr/bin/env python3
"""Tokens, UTF-8 bytes and characters of tokenised held-out sets, so that a per-token loss on them
(the training entry's evaluation: lm_loss, ppl) can be reported as bits per byte and per character.

    python tools/text_bytes.py --tokenizer-model data/tokenizer \\
        --data en=data/en_valid_text_document --data ko=data/ko_valid_text_document --output report/eval/text_bytes.json

Every document is decoded whole with the tokenizer it was made with (megatron_scale.data.inspection
decoded_size); the output is written atomically and printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from megatron_scale.durable import atomic_write
from megatron_scale.cli import name_value, run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer-model", required=True, help="the Hugging Face tokenizer the sets were made with")
    p.add_argument("--data", action="append", required=True, type=name_value("--data", "PREFIX"),
                   metavar="NAME=PREFIX", help="a tokenised set (repeatable)")
    p.add_argument("--output", required=True, help="JSON to write")
    args = p.parse_args(argv)
    names = [n for n, _ in args.data]
    if len(set(names)) != len(names):
        p.error(f"--data: a name given twice ({', '.join(names)})")
    warnings.filterwarnings("ignore", module="megatron")

    def work() -> dict:
        from megatron_scale.data.inspection import decoded_size
        from megatron_scale.data.tokenizer import TokenizerSpec

        tok = TokenizerSpec("HuggingFaceTokenizer", args.tokenizer_model).load()
        sets = {name: {"prefix": prefix, **decoded_size(prefix, tok)} for name, prefix in args.data}
        record = {"tokenizer": args.tokenizer_model, "sets": sets}
        atomic_write(args.output, json.dumps(record, indent=1) + "\n")
        return record

    return run_tool(work, (OSError, ValueError, IndexError))


if __name__ == "__main__":
    sys.exit(main())

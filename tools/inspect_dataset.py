#!/usr/bin/env python3
"""Print an indexed dataset's statistics and decode sample documents back to text.

    python tools/inspect_dataset.py data/demo/ko_train_text_document \
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model data/demo/tokenizer --samples 0 5
"""

from __future__ import annotations

import argparse
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    from megatron_scale.data.tokenizer import TOKENIZER_TYPES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", help="dataset prefix (path without .bin/.idx)")
    p.add_argument("--tokenizer-type", choices=TOKENIZER_TYPES)
    p.add_argument("--tokenizer-model", help="needed to decode samples")
    p.add_argument("--samples", type=int, nargs="*", default=[0], help="document indices to decode")
    p.add_argument("--max-chars", type=int, default=500)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.data.inspection import decode_documents, stats
    from megatron_scale.data.tokenizer import TokenizerSpec

    try:
        print(stats(args.prefix).table())
        if args.tokenizer_model:
            tok = TokenizerSpec(args.tokenizer_type or "HuggingFaceTokenizer", args.tokenizer_model).load()
            for i, text in zip(args.samples, decode_documents(args.prefix, tok, args.samples, args.max_chars)):
                print(f"\n--- document {i} ---\n{text}")
    except (ValueError, IndexError, OSError) as e:
        print(f"inspect_dataset.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

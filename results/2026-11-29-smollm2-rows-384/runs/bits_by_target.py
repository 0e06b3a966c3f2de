"""Where the Hangul rows' Korean learning comes from: the held-out NSMC loss split by what each
token predicts, a token of the 89 Hangul rows (the only logits the rows can raise) or any other
(spaces, digits, Latin letters, punctuation, the end of document: their logits stay z_p's).

    .venv/bin/python results/2026-11-29-smollm2-rows-384/runs/bits_by_target.py RECORDS.safetensors TOKENIZER

RECORDS: tools/route_records.py's file of a rows checkpoint (loss_p: the base's loss of each
token, loss_a: the trained model's; the labels). Over the same tokens, the share of the loss gone
is the share of bits per byte gone, the frontier's learning.
"""

from __future__ import annotations

import sys

from megatron_scale.data.tokenizer import token_bytes
from megatron_scale.model.layers.output_rows import script_rows
from megatron_scale.route_eval import stored


def main(path: str, tokenizer: str) -> None:
    records, meta = stored.load(path)
    pieces = token_bytes(tokenizer)
    rows = script_rows(pieces, len(pieces), "hangul")
    print(f"records {meta['load']}\n")
    print("| set | target | tokens | share of the base's loss | its loss gone | share of all the loss gone |")
    print("|---|---|---|---|---|---|")
    for name, r in records.items():
        if name.startswith("cal/"):
            continue
        p, a, labels = r["loss_p"].double(), r["loss_a"].double(), r[stored.LABELS]
        hangul = rows[labels]
        total_p = float(p.sum())
        for label, m in (("Hangul rows", hangul), ("other", ~hangul)):
            sp, sa = float(p[m].sum()), float(a[m].sum())
            gone = (sp - sa) / sp if sp else float("nan")
            print(f"| {name} | {label} | {int(m.sum())} | {sp / total_p:.3f} | {gone:+.3f} | {(sp - sa) / total_p:+.4f} |")
        print(f"| {name} | all | {labels.numel()} | 1.000 | {(total_p - float(a.sum())) / total_p:+.4f} | |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

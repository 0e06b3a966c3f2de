#!/usr/bin/env python3
"""Where the script rows' learning comes from: a records file's held-out loss split by what each
token predicts, a token of the script's output rows (the only logits the rows can raise) or any
other (their logits stay z_p's).

    python tools/bits_by_target.py RECORDS.safetensors TOKENIZER [--script hangul] [--out FILE]

RECORDS: tools/route_records.py's file of a rows checkpoint (loss_p, loss_a, the labels);
TOKENIZER: its byte-level tokenizer.json (or a folder holding one). Prints the table (stderr) and
its rows (stdout, JSON); --out also writes the table there, atomically. The work is
megatron_scale/route_eval/targets.py.
"""

from __future__ import annotations

import argparse
import sys

from megatron_scale.cli import run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", metavar="RECORDS", help="tools/route_records.py's .safetensors file")
    p.add_argument("tokenizer", metavar="TOKENIZER", help="the byte-level tokenizer.json, or its folder")
    p.add_argument("--script", default="hangul", help="the script whose output rows to split by (default hangul)")
    p.add_argument("--out", default=None, help="markdown file to write the table to")
    a = p.parse_args(argv)
    from megatron_scale.data.tokenizer import token_bytes
    from megatron_scale.durable import atomic_write
    from megatron_scale.model.layers.output_rows import script_rows
    from megatron_scale.route_eval import stored, targets

    def work() -> dict:
        records, meta = stored.load(a.records)
        pieces = token_bytes(a.tokenizer)
        rows = targets.loss_by_target(records, script_rows(pieces, len(pieces), a.script), f"{a.script.capitalize()} rows")
        md = f"records {meta['load']}\n\n" + targets.table(rows)
        print(md, file=sys.stderr, end="")
        if a.out:
            atomic_write(a.out, md)
        return {"records": a.records, "load": meta["load"], "rows": rows}

    return run_tool(work, (OSError, ValueError, KeyError))


if __name__ == "__main__":
    sys.exit(main())

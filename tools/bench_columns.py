"""One table from several `tools/bench_scale.py --out` files of one card and one shape: a row per
method, a column group per file (step s, tokens/s, MFU, peak GiB, method/full fine-tuning's
tokens/s), so the local, SDPA, TE and FP8 runs of a GPU session read side by side.

    python tools/bench_columns.py "local bf16=results/D/bench_local.json" \
        "local bf16, SDPA=results/D/bench_local_sdpa.json" "TE bf16=results/D/bench_te_bf16.json"

MFU is the FLOP model's FLOPs per second (megatron_scale/model/flops.py, as bench_scale.py counts
them) over the `--peak-tflops` each file was run with (its `args`); a file run without one shows
`-`. Files whose device or shape differ are refused, naming the file: their numbers do not
compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import bench_scale

SHAPE_KEYS = ("hidden", "heads", "groups", "ffn", "layers", "vocab", "seq", "batch", "bf16")


def load(label: str, path: Path) -> dict[str, Any]:
    """One bench file, finished, with its rows by method."""
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"bench_columns: {path}: not a readable bench_scale.py JSON ({e})") from None
    if d.get("status") != "done":
        raise SystemExit(f"bench_columns: {path}: the run did not finish (status {d.get('status')!r})")
    rows = {r["method"]: r for r in d["results"] if r.get("scope") == "model"}
    if "full_ft" not in rows:
        raise SystemExit(f"bench_columns: {path}: no full_ft row at the model scope (every ratio is against it)")
    return {"label": label, "path": path, "args": d["args"], "device": d["device"], "rows": rows}


def same_run(cols: list[dict[str, Any]]) -> None:
    """Every file on the first one's card and shape, else one error naming the file."""
    first = cols[0]
    for c in cols[1:]:
        if c["device"].get("name") != first["device"].get("name"):
            raise SystemExit(f"bench_columns: {c['path']}: device {c['device'].get('name')!r}, "
                             f"not {first['device'].get('name')!r} as {first['path']}")
        for k in SHAPE_KEYS:
            if c["args"].get(k) != first["args"].get(k):
                raise SystemExit(f"bench_columns: {c['path']}: --{k} {c['args'].get(k)!r}, "
                                 f"not {first['args'].get(k)!r} as {first['path']}")


def cells(col: dict[str, Any], method: str) -> dict[str, float | None] | None:
    """A method's numbers in one file (None where the file has no such row)."""
    r = col["rows"].get(method)
    if r is None:
        return None
    a = argparse.Namespace(**col["args"])
    tps = r["tokens"] / r["step_s"]
    mfu = bench_scale.mfu(a, "model", method, r) if a.peak_tflops else None
    full = col["rows"]["full_ft"]
    return {"step_s": r["step_s"], "tokens_s": tps, "mfu": mfu, "peak_gib": r["peak_bytes"] / 2**30,
            "vs_full": tps / (full["tokens"] / full["step_s"])}


def table(cols: list[dict[str, Any]]) -> str:
    """Markdown: one row per method (in the first file's order), one column group per file."""
    methods = list(dict.fromkeys(m for c in cols for m in c["rows"]))
    head = "| method | " + " | ".join(f"{c['label']}: step s / tokens/s / MFU / peak GiB / vs full" for c in cols) + " |"
    lines = [head, "|---" * (1 + len(cols)) + "|"]
    for m in methods:
        parts = []
        for c in cols:
            x = cells(c, m)
            if x is None:
                parts.append("-")
                continue
            mfu = "-" if x["mfu"] is None else f"{x['mfu']:.3f}"
            parts.append(f"{x['step_s']:.3f} / {x['tokens_s']:.0f} / {mfu} / {x['peak_gib']:.1f} / {x['vs_full']:.3f}x")
        lines.append(f"| {m} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="LABEL=FILE", help="a column's label and its bench_scale.py JSON")
    a = ap.parse_args(argv)
    cols = []
    for spec in a.files:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            ap.error(f"{spec!r}: expected LABEL=FILE")
        cols.append(load(label, Path(path)))
    same_run(cols)
    device = cols[0]["device"]
    print(f"device: {device.get('name')} ({device.get('memory_gib')} GiB, torch {device.get('torch')}); "
          f"shape: " + ", ".join(f"{k} {cols[0]['args'].get(k)}" for k in SHAPE_KEYS))
    print(table(cols))


if __name__ == "__main__":
    sys.exit(main())

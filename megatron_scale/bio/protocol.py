"""The controlled forgetting experiment on this project's training recipe.

    people     generate P people; the first `pretrain_people` are pre-trained on, the first
               `task0_people` of those form task 0, the next `task1_people` after the pre-training
               group (never seen by the model) form task 1
    pretrain   `full` from random weights on the pre-training group's biographies
    task 0     `full` from the pre-trained model on task 0's QA pairs
    task 1     per method, from the task-0 model (upscaled / deepened / LoRA'd on load as the
               training entry does): QA pairs of task 1; first-token accuracy on task 0's and
               task 1's QA pairs at step 0 and every `eval_interval` steps
Each stage is one run of the training entry's own setup and train step (training/loop.py) in
this process, at world size 1; checkpoints pass between stages as --load directories.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from typing import Any

import torch

from megatron_scale.bio import corpus, evaluate, router
from megatron_scale.bio.eval_plan import EvalPlan
from megatron_scale.bio.people import generate_people
from megatron_scale.bio.settings import Settings, method_config, record, router_records, stage_key
from megatron_scale.bio.variant import variant_tag
from megatron_scale.bio.texts import all_qa, biographies
from megatron_scale.durable import atomic_write
from megatron_scale.distributed import destroy_distributed, free_port
from megatron_scale.training.config import (
    Architecture, DataConfig, LoggingConfig, MethodConfig, ModelConfig, OptimConfig, ParallelConfig, ScheduleConfig, TrainConfig,
)
from megatron_scale.training.checkpointing import iteration_dir
from megatron_scale.training.loop import setup, train_step


def _single_process_env() -> None:
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())})


def base_config(s: Settings, tokenizer: str) -> TrainConfig:
    """The configuration every stage shares: the model, batches, device, seed."""
    arch = Architecture(num_layers=s.num_layers, hidden_size=s.hidden_size, num_attention_heads=s.num_attention_heads,
                        num_query_groups=s.num_query_groups, ffn_hidden_size=s.ffn_hidden_size)
    return TrainConfig(
        model=ModelConfig(architecture=arch, tokenizer_type="HuggingFaceTokenizer", tokenizer_model=tokenizer),
        parallel=ParallelConfig(device=s.device),
        optim=OptimConfig(lr=0.0, lr_warmup_iters=0, weight_decay=0.0),
        schedule=ScheduleConfig(micro_batch_size=s.micro_batch_size, global_batch_size=s.global_batch_size,
                                seq_length=s.seq_length, train_iters=1, seed=s.seed),
        data=DataConfig(split="100,0,0"),
        logging=LoggingConfig(eval_iters=1, log_interval=10**9),
    )


def stage_config(base: TrainConfig, method: MethodConfig, *, data: str, lr: float, load: str | None = None,
                 decay: str | None = None, table_lr: float | None = None) -> TrainConfig:
    """One stage's configuration: `base` with its method, dataset, LR (and the embedding/output
    tables' decoupled LR) and starting checkpoint."""
    return dataclasses.replace(
        base, method=method, data=dataclasses.replace(base.data, data_path=(data,)),
        optim=dataclasses.replace(base.optim, lr=lr, decoupled_lr=table_lr,
                                  **({"lr_decay_style": decay} if decay else {})),
        checkpoint=dataclasses.replace(base.checkpoint, load=load),
    )


Evals = dict[str, list[evaluate.Probe]]
ROUTE_KEYS = ("preserve_head_accuracy", "adapt_head_accuracy", "answer_preserve_fraction", "answer_cos_quantiles",
              "tau_sweep")


def run_stage(
    config: TrainConfig, *, iters: int, evals: Evals, eval_interval: int | EvalPlan, save: str | None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One run of the training entry's recipe; first-token accuracy on `evals` at step 0, every
    `eval_interval` steps (or as an EvalPlan says) and at the end. Returns its curves, losses and
    wall time."""
    plan = eval_interval if isinstance(eval_interval, EvalPlan) else EvalPlan(eval_interval)
    config = dataclasses.replace(
        config, schedule=dataclasses.replace(config.schedule, train_iters=iters),
        checkpoint=dataclasses.replace(config.checkpoint, save=save),
    )
    _single_process_env()
    start = time.monotonic()
    run = setup(config)
    curves: dict[str, list[dict[str, Any]]] = {name: [] for name in evals}
    steps: list[int] = []
    losses: list[float] = []
    eval_seconds = 0.0
    base_logits: dict[str, Any] = {}
    baseline: dict[str, dict[str, list[float]]] = {}

    def measure() -> None:
        nonlocal eval_seconds
        t = time.monotonic()
        steps.append(run.iteration)
        for name, items in evals.items():
            curves[name].append(evaluate.first_token_accuracy(run.model, items))
            if plan.baseline and name not in base_logits:  # step 0: the model as loaded, the task-0 model's function
                base_logits[name] = evaluate.answer_logits(run.model, items)
        eval_seconds += time.monotonic() - t
        shown = " ".join(f"{n}={curves[n][-1]['accuracy']:.3f}" for n in evals)
        progress(f"    step {run.iteration:5d}  loss {losses[-1] if losses else float('nan'):.4f}  {shown}")

    def reached() -> bool:
        return plan.stop_at is not None and "task1" in curves and curves["task1"][-1]["accuracy"] >= plan.stop_at

    try:
        if evals:
            measure()
        while run.iteration < iters and not (evals and reached()):
            losses.append(train_step(run)["lm_loss"])
            last = tuple(zip(steps[-2:], (c["accuracy"] for c in curves.get("task1", [])[-2:]), strict=False))
            if evals and plan.due(run.iteration, iters, last):
                measure()
            elif not evals and (run.iteration % (10 * plan.interval) == 0 or run.iteration == iters):
                progress(f"    step {run.iteration:5d}  loss {losses[-1]:.4f}  {time.monotonic() - start:.0f}s")
        if evals and (plan.baseline or plan.heads):  # the model of the last evaluation: it ended right after one
            t = time.monotonic()
            for name, items in evals.items():
                rec = (evaluate.baseline_records(base_logits[name], run.model, items) if plan.baseline
                       else evaluate.answer_records(run.model, items))
                baseline[name] = evaluate.json_records(rec)
            eval_seconds += time.monotonic() - t
        if save:
            run.save()
    finally:
        run.log.close()
        destroy_distributed()
        # the torn-down gloo groups sit in reference cycles: unless collected, each stage leaves ~20 gloo
        # TCP-loop threads (some spinning) and ~40 run-loop threads behind, and a frontier of many
        # stages in one process slows to a crawl
        gc.collect()
    final_records = {n: v[-1]["records"] for n, v in curves.items() if v and "records" in v[-1]}
    return {
        "steps": steps, "accuracy": {n: [c["accuracy"] for c in v] for n, v in curves.items()},
        "per_attribute": {n: [c["per_attribute"] for c in v] for n, v in curves.items()},
        "preserve_fraction": {n: [c.get("preserve_fraction") for c in v] for n, v in curves.items()},
        # SCALE methods: what W_out_up h_up does to each task's answers (bio/evaluate.expansion_effect)
        "expansion": {n: [c["expansion"] for c in v] for n, v in curves.items() if v and "expansion" in v[0]},
        "route": {n: [{k: c[k] for k in ROUTE_KEYS if k in c} for c in v] for n, v in curves.items()
                  if any("tau_sweep" in c for c in v)},
        # per-probe router records of the last evaluation only (every statistic; bio/router.py): a
        # Route model's two heads, or (EvalPlan.baseline) the step-0 model against the trained one
        "final_records": final_records or baseline,
        **({"baseline_records": True} if baseline and not final_records and plan.baseline else {}),
        "stopped_at": run.iteration if reached() else None,
        "loss": losses, "seconds": time.monotonic() - start, "eval_seconds": eval_seconds,
    }


def _sample(items: list, people: int, per_person: int, limit: int, seed: int) -> list:
    if not limit or limit >= people:
        return items
    chosen = sorted(random.Random(seed).sample(range(people), limit))
    return [items[i * per_person + j] for i in chosen for j in range(per_person)]


def float_path() -> dict[str, Any]:
    """What decides a CPU stage's floats besides its settings: the kernels torch dispatches to (the
    host's instruction set), its version and threads. Recorded beside each stage, never compared:
    the 2026-12-03 controls' pre-training matched the 11-27 run's bitwise and v2's not at all, and
    only a rerun on another machine (2026-12-04) told the host's instruction set apart as the cause."""
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


class StageMismatch(ValueError):
    """An --out folder holds a stage made with other settings."""


def stage(path: str, key: dict[str, Any], run: Callable[[], dict[str, Any]], checkpoint: str | None,
          progress: Callable[[str], None]) -> dict[str, Any]:
    """A stage's result, from `path` when an earlier call finished it with the same settings
    (`key`, stage_key's; written atomically after the stage's checkpoint, so a killed run repeats
    only the stage it was in) and its checkpoint is still there (stage files alone, copied from
    another machine, rerun the stages that save one: they are deterministic); else the stage is
    run from scratch (its partial checkpoint removed) and recorded."""
    if os.path.exists(path) and (checkpoint is None or os.path.isdir(checkpoint)):  # a later stage loads it
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        # a setting added since the file was written counts as its default there
        defaults = record(Settings())
        was = {k: doc["settings"].get(k, json.loads(json.dumps(defaults[k]))) for k in key}
        if was != json.loads(json.dumps(key)):
            changed = sorted(k for k in key if was[k] != json.loads(json.dumps(key[k])))
            raise StageMismatch(f"{path}: made by a run with other settings ({', '.join(changed)}); use another --out")
        progress(f"  done before: {path}")
        made, here = doc.get("float_path"), float_path()
        if made and made.get("cpu_capability") != here["cpu_capability"]:
            progress(f"  note: {path} was made on {made['cpu_capability']} kernels, this machine runs "
                     f"{here['cpu_capability']}: the stages after it are not bitwise those of its machine")
        return doc["result"]
    if checkpoint and os.path.exists(checkpoint):
        shutil.rmtree(checkpoint)
    result = run()
    atomic_write(path, (json.dumps({"settings": key, "result": result, "float_path": float_path()}) + "\n").encode("utf-8"))
    return result


def run_protocol(s: Settings, out_dir: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every stage in order; returns the results (results.json's content). Stages finished by an
    earlier call into the same `out_dir` with the same settings are read, not run again."""
    s.check()
    t0 = time.monotonic()
    os.makedirs(out_dir, exist_ok=True)
    people = generate_people(s.pretrain_people + s.task1_people, s.seed)
    pre, task0, task1 = people[: s.pretrain_people], people[: s.task0_people], people[s.pretrain_people :]
    bios = biographies(pre, s.bios_per_person, s.seed + 1)
    qa0, qa1 = all_qa(task0), all_qa(task1)

    data = os.path.join(out_dir, "data")
    tok = corpus.build_tokenizer(bios + corpus.qa_texts(qa0 + qa1), s.vocab_size, os.path.join(data, "tokenizer"))
    bio_prefix = corpus.write_dataset(os.path.join(data, "bios"), corpus.encode_texts(tok, bios), tok.eod)
    qa0_prefix = corpus.write_dataset(os.path.join(data, "qa0"), corpus.encode_texts(tok, corpus.qa_texts(qa0)), tok.eod)
    qa1_prefix = corpus.write_dataset(os.path.join(data, "qa1"), corpus.encode_texts(tok, corpus.qa_texts(qa1)), tok.eod)
    per_person = len(qa0) // len(task0)
    probes0 = evaluate.probes(tok, _sample(qa0, len(task0), per_person, s.eval_people, s.seed))
    probes1 = evaluate.probes(tok, _sample(qa1, len(task1), per_person, s.eval_people, s.seed))
    targets = {a: len({p.target for p in probes0 + probes1 if p.attribute == a}) for a in sorted({p.attribute for p in probes0})}
    progress(f"data: {len(people)} people, {len(bios)} biographies, {len(qa0)} task-0 and {len(qa1)} task-1 QA pairs, "
             f"vocab {tok.vocab_size}, {time.monotonic() - t0:.1f}s")

    base = base_config(s, os.path.join(data, "tokenizer"))
    full = MethodConfig(name="full")
    ckpt = os.path.join(out_dir, "checkpoints")
    stages = os.path.join(out_dir, "stages")
    os.makedirs(stages, exist_ok=True)
    progress("pretrain: full, biographies of the pre-training group")
    pretrain = stage(os.path.join(stages, "pretrain.json"), stage_key(s), lambda: run_stage(
        stage_config(base, full, data=bio_prefix, lr=s.pretrain_lr), iters=s.pretrain_iters, evals={},
        eval_interval=s.eval_interval, save=os.path.join(ckpt, "pretrain"), progress=progress),
        os.path.join(ckpt, "pretrain"), progress)
    progress(f"  {pretrain['seconds']:.1f}s, loss {pretrain['loss'][0]:.3f} -> {pretrain['loss'][-1]:.3f}")
    progress("task 0: full, QA of the task-0 group")
    task0_run = stage(os.path.join(stages, "task0.json"), stage_key(s), lambda: run_stage(
        stage_config(base, full, data=qa0_prefix, lr=s.task0_lr,
                     load=str(iteration_dir(os.path.join(ckpt, "pretrain"), s.pretrain_iters))),
        iters=s.task0_iters, evals={"task0": probes0}, eval_interval=s.eval_interval,
        save=os.path.join(ckpt, "task0"), progress=progress), os.path.join(ckpt, "task0"), progress)
    task0_ckpt = str(iteration_dir(os.path.join(ckpt, "task0"), s.task0_iters))
    methods: dict[str, Any] = {}
    grid = s.task1_grid
    for method, lr in ((m, lr) for m in s.methods for lr in grid):
        key = method if len(grid) == 1 else f"{method}@{lr:g}"  # one entry per method and LR
        progress(f"task 1: {method} at lr {lr:g}")
        baseline, heads = router_records(method)  # a non-SCALE run: its step-0 model; SCALE-Preserve: its two heads
        plan = EvalPlan(s.eval_interval, s.eval_dense_until, s.eval_dense_interval, s.task1_stop_at, s.eval_dense_gap,
                        baseline=s.routed_baselines and baseline, heads=s.routed_baselines and heads)
        r = stage(os.path.join(stages, f"task1_{method}{variant_tag(record(s), method)}_lr{lr:g}.json"), stage_key(s, method),
                  lambda method=method, lr=lr, plan=plan: run_stage(
            stage_config(base, method_config(s, method), data=qa1_prefix, lr=lr, load=task0_ckpt, decay="constant",
                         table_lr=None if s.task1_table_lr_mult is None else lr * s.task1_table_lr_mult),
            iters=s.task1_iters, evals={"task0": probes0, "task1": probes1}, eval_interval=plan,
            save=None, progress=progress), None, progress)
        methods[key] = {"method": method, "lr": lr, **r}
        progress(f"  {r['seconds']:.1f}s")
        if r["final_records"]:
            methods[key]["router"] = router.analyse(r["final_records"])
            for line in router.summary_lines(methods[key]["router"]):
                progress("  " + line)
    return {
        "settings": record(s),
        "data": {"people": len(people), "biographies": len(bios), "task0_qa": len(qa0), "task1_qa": len(qa1),
                 "task0_probes": len(probes0), "task1_probes": len(probes1), "vocab_size": tok.vocab_size,
                 "distinct_first_tokens": targets},
        "pretrain": pretrain, "task0": task0_run, "methods": methods,
        "seconds": time.monotonic() - t0,
    }

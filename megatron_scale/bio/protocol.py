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

import argparse
import dataclasses
import gc
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from megatron_scale.bio import corpus, evaluate, router
from megatron_scale.bio.eval_plan import EvalPlan
from megatron_scale.bio.people import generate_people
from megatron_scale.bio.variant import GATE, gate_of, variant_tag
from megatron_scale.bio.texts import all_qa, biographies
from megatron_scale import method_catalog as catalog
from megatron_scale.durable import atomic_write
from megatron_scale.distributed import destroy_distributed, free_port
from megatron_scale.methods import NAMES
from megatron_scale.methods.scale import ScaleSettings
from megatron_scale.scale_checks import check_gate
from megatron_scale.training.config import (
    Architecture, DataConfig, LoggingConfig, MethodConfig, ModelConfig, OptimConfig, ParallelConfig, ScheduleConfig, TrainConfig,
)
from megatron_scale.training.checkpointing import iteration_dir
from megatron_scale.training.loop import setup, train_step

METHODS = NAMES  # the training entry's --method values (megatron_scale/methods/)


@dataclass
class Settings:
    seed: int = 1234
    pretrain_people: int = 100
    task0_people: int = 50
    task1_people: int = 20
    bios_per_person: int = 5
    vocab_size: int = 1024
    num_layers: int = 4
    hidden_size: int = 128
    num_attention_heads: int = 8
    num_query_groups: int = 4
    ffn_hidden_size: int = 384
    seq_length: int = 64
    micro_batch_size: int = 16
    global_batch_size: int = 16
    pretrain_iters: int = 600
    pretrain_lr: float = 3e-3
    task0_iters: int = 300
    task0_lr: float = 1e-3
    task1_iters: int = 200
    task1_lr: float = 1e-3
    task1_lrs: tuple[float, ...] = ()  # the frontier: every method at each of these LRs (empty: task1_lr alone)
    task1_table_lr_mult: float | None = None  # task 1: the embedding/output tables (SCALE: E_up, W_out_up) at LR x this
    eval_interval: int = 20
    eval_dense_until: int = 0  # task 1: also evaluate every eval_dense_interval steps up to this step
    eval_dense_interval: int = 10
    eval_dense_gap: float | None = None  # task 1: also every eval_dense_interval steps while task-1 accuracy moves faster
    task1_stop_at: float | None = None  # task 1: stop at the first evaluation with task-1 accuracy >= this
    # task 1, per-probe router records at the last evaluation: a non-SCALE run against its step-0 (task-0)
    # model (the routed-baseline control); a scale-preserve run of its two heads (Route's router on it)
    routed_baselines: bool = False
    eval_people: int = 0  # 0: every person of the task; else a seeded sample of this many
    methods: tuple[str, ...] = METHODS
    device: str = "cpu"
    freeze_layers: int | None = None  # default: the bottom 3/4 of the layers
    lora_rank: int = 8
    lora_alpha: float | None = None  # default 2 x lora_rank
    router_tau: float | None = None  # SCALE-Route's tau (default: the training entry's)
    router_statistic: str | None = None  # SCALE-Route's statistic (default: the training entry's, cosine)
    router_direction: str | None = None  # SCALE-Route's direction (default: the training entry's, above)
    # SCALE trained through a gate (--scale-gate-*, model/layers/gate.py; None: no gate, the paper's)
    gate_statistic: str | None = None
    gate_tau: float | None = None
    gate_temperature: float | None = None
    gate_direction: str | None = None

    def check(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"--methods: unknown {unknown}; choose from {', '.join(METHODS)}")
        if not 0 < self.task0_people <= self.pretrain_people:
            raise ValueError(f"--task0-people {self.task0_people} must lie in 1..--pretrain-people {self.pretrain_people}")
        if self.task1_people < 1:
            raise ValueError("--task1-people must be at least 1")
        if self.eval_interval < 1:
            raise ValueError("--eval-interval must be at least 1")
        if self.eval_dense_interval < 1 or self.eval_dense_until < 0:
            raise ValueError("--eval-dense-interval must be at least 1 and --eval-dense-until at least 0")
        if self.eval_dense_gap is not None and not self.eval_dense_gap > 0:
            raise ValueError(f"--eval-dense-gap {self.eval_dense_gap}: must be > 0")
        if self.task1_stop_at is not None and not 0 < self.task1_stop_at <= 1:
            raise ValueError(f"--task1-stop-at {self.task1_stop_at}: must be a task-1 accuracy in (0, 1]")
        if self.lora_alpha is not None and not self.lora_alpha > 0:
            raise ValueError(f"--lora-alpha {self.lora_alpha}: must be > 0")
        if self.task1_table_lr_mult is not None and not self.task1_table_lr_mult >= 0:
            raise ValueError(f"--task1-table-lr-mult {self.task1_table_lr_mult}: must be >= 0")
        if self.gate_statistic is not None:
            check_gate(*gate_of(vars(self)))
        if any(not lr > 0 for lr in self.task1_lrs) or len(set(self.task1_lrs)) != len(self.task1_lrs):
            raise ValueError(f"--task1-lrs must be distinct positive learning rates; got {list(self.task1_lrs)}")

    @property
    def task1_grid(self) -> tuple[float, ...]:
        """The task-1 learning rates each method runs at."""
        return self.task1_lrs or (self.task1_lr,)


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


def method_config(s: Settings, method: str) -> MethodConfig:
    """`--method method` with the experiment's settings of every method, as a command line giving
    all of their flags would (each method reads its own: megatron_scale/methods/)."""
    freeze_layers = s.freeze_layers if s.freeze_layers is not None else s.num_layers - max(1, s.num_layers // 4)
    lora_alpha = s.lora_alpha if s.lora_alpha is not None else 2.0 * s.lora_rank
    return MethodConfig(
        name=method, freeze_layers=freeze_layers, lora_rank=s.lora_rank, lora_alpha=lora_alpha,
        scale=ScaleSettings(router_tau=s.router_tau, router_statistic=s.router_statistic,
                            router_direction=s.router_direction, gate_statistic=s.gate_statistic, gate_tau=s.gate_tau,
                            gate_temperature=s.gate_temperature, gate_direction=s.gate_direction),
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


class StageMismatch(ValueError):
    """An --out folder holds a stage made with other settings."""


STAGE_KEY_SKIPS = ("methods", "task1_lr", "task1_lrs")  # settings that only choose which task-1 runs there are
# settings of task 1 alone: the pre-training and task-0 stages do not depend on them
TASK1_ONLY = ("task1_iters", "task1_table_lr_mult", "eval_dense_until", "eval_dense_interval", "eval_dense_gap", "task1_stop_at",
              "routed_baselines", "freeze_layers", "lora_rank", "lora_alpha", "router_tau", "router_statistic",
              "router_direction", *GATE)
# settings a task-1 method does not read
_SCALE_UNREAD = ("freeze_layers", "lora_rank", "lora_alpha")
UNREAD = {"freeze": ("lora_rank", "lora_alpha", "router_tau", "router_statistic", "router_direction", *GATE),
          "lora": ("freeze_layers", "router_tau", "router_statistic", "router_direction", *GATE),
          "scale-preserve": _SCALE_UNREAD, "scale-route": (*_SCALE_UNREAD, "routed_baselines"),
          "scale-adapt": (*_SCALE_UNREAD, "routed_baselines")}


def stage_key(s: Settings, method: str | None = None) -> dict[str, Any]:
    """What a stage's result depends on: every setting but those choosing which task-1 runs there
    are; for the pre-training and task-0 stages (method None) also none of task 1's; for a task-1
    stage none its method does not read (so a run of one method is kept when another's flags change)."""
    skip = set(STAGE_KEY_SKIPS)
    if method is None:
        skip |= set(TASK1_ONLY)
    else:
        skip |= set(UNREAD.get(method, ("lora_rank", "lora_alpha", "router_tau", "router_statistic", "router_direction",
                                        "freeze_layers", *GATE)))
    if s.gate_statistic is None:  # no gate: the key stages written before the gate existed have
        skip |= set(GATE)
    return {k: v for k, v in asdict(s).items() if k not in skip}


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
        defaults = asdict(Settings())
        was = {k: doc["settings"].get(k, json.loads(json.dumps(defaults[k]))) for k in key}
        if was != json.loads(json.dumps(key)):
            changed = sorted(k for k in key if was[k] != json.loads(json.dumps(key[k])))
            raise StageMismatch(f"{path}: made by a run with other settings ({', '.join(changed)}); use another --out")
        progress(f"  done before: {path}")
        return doc["result"]
    if checkpoint and os.path.exists(checkpoint):
        shutil.rmtree(checkpoint)
    result = run()
    atomic_write(path, (json.dumps({"settings": key, "result": result}) + "\n").encode("utf-8"))
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
        kind = catalog.method(method)  # a SCALE-Preserve run records its two heads; a non-SCALE one its step-0 model
        plan = EvalPlan(s.eval_interval, s.eval_dense_until, s.eval_dense_interval, s.task1_stop_at, s.eval_dense_gap,
                        baseline=s.routed_baselines and not kind.upscaled,
                        heads=s.routed_baselines and kind.variant == "preserve")
        r = stage(os.path.join(stages, f"task1_{method}{variant_tag(asdict(s), method)}_lr{lr:g}.json"), stage_key(s, method),
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
        "settings": asdict(s),
        "data": {"people": len(people), "biographies": len(bios), "task0_qa": len(qa0), "task1_qa": len(qa1),
                 "task0_probes": len(probes0), "task1_probes": len(probes1), "vocab_size": tok.vocab_size,
                 "distinct_first_tokens": targets},
        "pretrain": pretrain, "task0": task0_run, "methods": methods,
        "seconds": time.monotonic() - t0,
    }


def settings_from(ns: argparse.Namespace, preset: Settings) -> Settings:
    """Settings = preset, overridden by the flags given (None: keep the preset's)."""
    values = asdict(preset)
    for key in values:
        v = getattr(ns, key, None)
        if v is not None:
            values[key] = tuple(v) if isinstance(values[key], tuple) else v
    return Settings(**values)

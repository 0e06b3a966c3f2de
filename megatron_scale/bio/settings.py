"""The biography benchmark's settings: the experiment's own (Settings' fields, each a flag of
tools/biography_benchmark.py with its docstring as help) and the methods' (`Settings.method`:
the training entry's MethodConfig, parsed from the training entry's flags), with what a stage's
result depends on (stage_key) derived from the methods' flags classes (megatron_scale/methods/).

The stage files and results.json keep the settings flat (`record`): the experiment's fields, then
every method flag by its setting_name (--lora-rank: lora_rank; SCALE's router and gate flags
without "scale-": --scale-gate-tau: gate_tau, as the benchmark has always named them).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from megatron_scale import method_catalog as catalog
from megatron_scale.bio.variant import gate_of
from megatron_scale.flags import add_flags, flag, values
from megatron_scale.methods import NAMES, method_class
from megatron_scale.training.config import MethodConfig, add_method_flags, method_flag_values, with_method_flags

METHODS = NAMES  # the training entry's --method values (megatron_scale/methods/)
SHORT_FLAGS = ("--scale-router-", "--scale-gate-")
"""SCALE's router and gate flags, which the biography benchmark also spells without "scale-" (its
--router-tau, --gate-tau, ... of before it took the training entry's flags): the names they have
in its stage files and results.json too."""


def bio_flag(flag_name: str) -> str:
    """The biography benchmark's name of a method flag (the training entry's, SHORT_FLAGS shortened)."""
    return "--" + flag_name.removeprefix("--scale-") if flag_name.startswith(SHORT_FLAGS) else flag_name


def setting_name(flag_name: str) -> str:
    """A method flag's key in the stage files and results.json: --scale-gate-tau -> gate_tau, --lora-rank -> lora_rank."""
    return bio_flag(flag_name).removeprefix("--").replace("-", "_")


def protocol_method() -> MethodConfig:
    """The methods' settings a run starts from: each method's own defaults (MethodConfig), but
    --freeze-layers left None (the bottom 3/4 of --num-layers: method_config) and --lora-rank
    written out as 8 (LoRA's own default), as the stage files have always recorded them."""
    return dataclasses.replace(MethodConfig(), freeze_layers=None, lora_rank=8)


@dataclass
class Settings:
    """The experiment: the synthetic people, the model, the three stages' schedules and evaluation
    (each field a flag of tools/biography_benchmark.py), and the methods' own settings (`method`:
    the training entry's MethodConfig, its flags the training entry's)."""

    seed: int = field(default=1234, metadata=flag("--seed"))
    """Seed of the people, the biographies, the model's init and the data order."""
    pretrain_people: int = field(default=100, metadata=flag("--pretrain-people"))
    """People whose biographies are pre-trained on."""
    task0_people: int = field(default=50, metadata=flag("--task0-people"))
    """The first of the pre-trained people, whose QA pairs are task 0."""
    task1_people: int = field(default=20, metadata=flag("--task1-people"))
    """People never pre-trained on, whose QA pairs are task 1."""
    bios_per_person: int = field(default=5, metadata=flag("--bios-per-person"))
    """Biographies written per pre-trained person."""
    vocab_size: int = field(default=1024, metadata=flag("--vocab-size"))
    """The BPE tokenizer's vocabulary, trained on the texts."""
    num_layers: int = field(default=4, metadata=flag("--num-layers"))
    """The model's layers."""
    hidden_size: int = field(default=128, metadata=flag("--hidden-size"))
    """The model's hidden size."""
    num_attention_heads: int = field(default=8, metadata=flag("--num-attention-heads"))
    """Attention heads."""
    num_query_groups: int = field(default=4, metadata=flag("--num-query-groups"))
    """Key-value groups (GQA)."""
    ffn_hidden_size: int = field(default=384, metadata=flag("--ffn-hidden-size"))
    """The MLP's hidden size."""
    seq_length: int = field(default=64, metadata=flag("--seq-length"))
    """Tokens per sequence."""
    micro_batch_size: int = field(default=16, metadata=flag("--micro-batch-size"))
    """Sequences per microbatch."""
    global_batch_size: int = field(default=16, metadata=flag("--global-batch-size"))
    """Sequences per optimizer step."""
    pretrain_iters: int = field(default=600, metadata=flag("--pretrain-iters"))
    """Pre-training steps (full, from random weights)."""
    pretrain_lr: float = field(default=3e-3, metadata=flag("--pretrain-lr"))
    """Pre-training's LR."""
    task0_iters: int = field(default=300, metadata=flag("--task0-iters"))
    """Task 0's steps (full, from the pre-trained model)."""
    task0_lr: float = field(default=1e-3, metadata=flag("--task0-lr"))
    """Task 0's LR."""
    task1_iters: int = field(default=200, metadata=flag("--task1-iters"))
    """Task 1's steps per method (a hard cap with --task1-stop-at)."""
    task1_lr: float = field(default=1e-3, metadata=flag("--task1-lr"))
    """Task 1's LR (without --task1-lrs)."""
    task1_lrs: tuple[float, ...] = field(default=(), metadata=flag("--task1-lrs"))
    """The frontier: every method at each of these task-1 LRs (default: --task1-lr alone)."""
    task1_table_lr_mult: float | None = field(default=None, metadata=flag("--task1-table-lr-mult"))
    """Task 1: the embedding/output tables (SCALE: E_up, W_out_up) at LR x this."""
    eval_interval: int = field(default=20, metadata=flag("--eval-interval"))
    """Evaluate every this many steps."""
    eval_dense_until: int = field(default=0, metadata=flag("--eval-dense-until"))
    """Task 1: also evaluate every --eval-dense-interval steps up to this step."""
    eval_dense_interval: int = field(default=10, metadata=flag("--eval-dense-interval"))
    """Task 1: the dense evaluations' interval."""
    eval_dense_gap: float | None = field(default=None, metadata=flag("--eval-dense-gap"))
    """Task 1: also every --eval-dense-interval steps while task-1 accuracy moves faster than this."""
    task1_stop_at: float | None = field(default=None, metadata=flag("--task1-stop-at"))
    """Stop each task-1 run at its first evaluation with task-1 accuracy >= this (--task1-iters is
    then a hard cap)."""
    routed_baselines: bool = field(default=False, metadata=flag("--routed-baselines"))
    """Task-1 runs: per-probe router records at the last evaluation: a non-SCALE run against its
    step-0 (task-0) model (the routed-baseline control, base/<method>[...] rows); a scale-preserve
    run of its two heads (Route's router on it: scale-route[...] rows)."""
    eval_people: int = field(default=0, metadata=flag("--eval-people"))
    """Probes of this many people per task, a seeded sample (0: every person of the task)."""
    methods: tuple[str, ...] = field(default=METHODS, metadata=flag("--methods", choices=METHODS))
    """The task-1 methods (the training entry's --method values)."""
    device: str = field(default="cpu", metadata=flag("--device", choices=("cpu", "cuda", "auto")))
    """Where the stages compute."""
    method: MethodConfig = field(default_factory=protocol_method)
    """The methods' settings (their flags: --freeze-layers, --lora-rank, --scale-*, ...), the same
    for every task-1 run; each method reads its own (megatron_scale/methods/)."""

    def check(self) -> None:
        if not self.methods:
            raise ValueError(f"--methods: give at least one of {', '.join(METHODS)}")
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
        if self.method.lora_alpha is not None and not self.method.lora_alpha > 0:
            raise ValueError(f"--lora-alpha {self.method.lora_alpha}: must be > 0")
        if self.task1_table_lr_mult is not None and not self.task1_table_lr_mult >= 0:
            raise ValueError(f"--task1-table-lr-mult {self.task1_table_lr_mult}: must be >= 0")
        gate_of(record(self)).check()  # SCALE's gate, the training entry's check (its defaults pass)
        if any(not lr > 0 for lr in self.task1_lrs) or len(set(self.task1_lrs)) != len(self.task1_lrs):
            raise ValueError(f"--task1-lrs must be distinct positive learning rates; got {list(self.task1_lrs)}")

    @property
    def task1_grid(self) -> tuple[float, ...]:
        """The task-1 learning rates each method runs at."""
        return self.task1_lrs or (self.task1_lr,)


def record(s: Settings) -> dict[str, Any]:
    """The settings as the stage files and results.json keep them: the experiment's own fields,
    then every method flag by its setting_name (None: not given)."""
    out = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "method"}
    out.update({setting_name(k): v for k, v in method_flag_values(s.method).items()})
    return out


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """The experiment's flags (Settings' fields) and the methods' own (the training entry's, SCALE's
    router and gate ones also by their bio_flag names), each None where not given."""
    add_flags(parser.add_argument_group("the protocol (default: the preset's)"), Settings, optional=True)
    add_method_flags(parser, aliases=lambda f: (bio_flag(f),) if bio_flag(f) != f else ())


def settings_from(ns: argparse.Namespace, preset: Settings) -> Settings:
    """Settings = preset, overridden by the flags given (add_settings_flags' parser; None: keep the preset's)."""
    given_here = {k: v for k, v in values(Settings, ns).items() if v is not None}
    return dataclasses.replace(preset, **given_here, method=with_method_flags(preset.method, ns))


def method_config(s: Settings, method: str) -> MethodConfig:
    """`--method method` with the experiment's settings of every method (each method reads its
    own), and the protocol's two defaults of its own: Freeze freezes the bottom 3/4 of the layers,
    and LoRA's alpha is 2 x its rank."""
    m = s.method
    fill: dict[str, Any] = {}
    if m.freeze_layers is None:
        fill["freeze_layers"] = s.num_layers - max(1, s.num_layers // 4)
    if m.lora_alpha is None:
        fill["lora_alpha"] = 2.0 * m.lora_rank
    return dataclasses.replace(m, name=method, **fill)


STAGE_KEY_SKIPS = ("methods", "task1_lr", "task1_lrs")  # settings that only choose which task-1 runs there are
METHOD_SETTINGS = tuple(setting_name(f) for f in method_flag_values(MethodConfig()))
"""Every method flag's setting_name: settings of task 1 alone, each read by its own method."""
# settings of task 1 alone: the pre-training and task-0 stages do not depend on them
TASK1_ONLY = ("task1_iters", "task1_table_lr_mult", "eval_dense_until", "eval_dense_interval", "eval_dense_gap",
              "task1_stop_at", "routed_baselines", *METHOD_SETTINGS)


def router_records(method: str) -> tuple[bool, bool]:
    """What --routed-baselines records of a task-1 run of `method`: (its step-0 model against it: a
    run that does not upscale; its two heads: a SCALE-Preserve run)."""
    kind = catalog.method(method)
    return not kind.upscaled, kind.variant == "preserve"


def unread(method: str) -> tuple[str, ...]:
    """The settings a task-1 stage of `method` does not read: the other methods' flags (its own:
    its flags class, methods/), and --routed-baselines where it records nothing."""
    flags = method_class(method).flags
    mine = set() if flags is None else {setting_name(f) for f in method_flag_values(MethodConfig(), flags)}
    return (*(k for k in METHOD_SETTINGS if k not in mine), *(() if any(router_records(method)) else ("routed_baselines",)))


UNREAD = {name: unread(name) for name in METHODS}
"""Per --method value, the settings its task-1 stages are not keyed by (from the methods' flags classes)."""


def stage_key(s: Settings, method: str | None = None) -> dict[str, Any]:
    """What a stage's result depends on: every setting but those choosing which task-1 runs there
    are; for the pre-training and task-0 stages (method None) also none of task 1's; for a task-1
    stage none its method does not read (so a run of one method is kept when another's flags change)."""
    skip = set(STAGE_KEY_SKIPS) | set(TASK1_ONLY if method is None else UNREAD[method])
    return {k: v for k, v in record(s).items() if k not in skip}

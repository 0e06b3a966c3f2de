"""From a TrainConfig to a run that can start: every check before any process group or model
exists, each failure one FlagError naming the flag (or --load's record), which the entry prints
as one line.

    plan(config, world_size) -> Plan(config completed, architecture, method, resume / initial
                                      checkpoint, the model_args record the run's checkpoints carry,
                                      --load's records)

What --load records supplies the model: conversion, upscaling and training record the
architecture (`model_args`, LlamaArgs), the SCALE geometry (`scale.dims`) and LoRA's rank and alpha
(`scale.lora`) in a checkpoint's common state. The records are read once, here, and travel in the
Plan to the loaders. An architecture flag the user left out is taken from the record; a given flag
that describes another model is refused by name. The method's class plans the method
(megatron_scale/methods/): from a checkpoint of its own, the recorded method itself (SCALE: the
recorded geometry, compared with the --scale-* flags given, not resolved again). Flags describing the new run
(method, LR, data, batch, layout) stay the user's. Without a record the flags' own defaults apply
and the four sizes must be given. A run being resumed also keeps its LR schedule, which
megatron-core's scheduler only asserts on: a flag that changes it is refused here, by name; it may
change its TP / PP / DP where the checkpoint's optimizer state allows (checkpoint/layout.py), else
it is refused here with the reason.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megatron_scale.checkpoint.io import latest_iteration_dir
from megatron_scale.checkpoint.layout import SavedLayout, check_resume, run_layout
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords, read_records
from megatron_scale.flags import given
from megatron_scale.methods import Given, TrainingMethod, method_class
from megatron_scale.model.args import FLAGS, ArchitectureError, LlamaArgs
from megatron_scale.training.config import TrainConfig
from megatron_scale.training.optim import decoupled_record

# LlamaArgs fields taken from the record but never compared: a run may extend its context.
CARRIED_ONLY = ("max_position_embeddings",)


class FlagError(ValueError):
    """A flag (or the checkpoint --load names) cannot make a run; the message names it."""


@dataclass(frozen=True)
class Plan:
    """A checked run: its completed configuration and what it builds and loads."""

    config: TrainConfig
    """The configuration with what --load records filled in."""
    architecture: LlamaArgs
    """The base architecture (LLaMA-Pro: the base's layer count; the model grows by its blocks)."""
    method: TrainingMethod
    """What the model is built as and what trains (from --load: the recorded method)."""
    resume: Path | None
    """The run checkpoint to resume (its model, optimizer, schedule and RNG), if any."""
    initial: Path | None
    """The checkpoint the first weights come from when not resuming, if any."""
    record: dict[str, Any]
    """The model_args the run's checkpoints record (the model's own layer count)."""
    data_parallel_size: int
    layout: SavedLayout
    """The layout the run's checkpoints record (and save their optimizer state for)."""
    resumed_layout: SavedLayout | None = None
    """The layout of the checkpoint being resumed (None: not resuming, or not known)."""
    reshard: str | None = None
    """The line a resume at another layout prints (checkpoint/layout.py check_resume)."""
    records: CheckpointRecords | None = None
    """--load's records, read once here and handed to the loaders."""


def load_source(load: str | None) -> tuple[Path | None, bool]:
    """The checkpoint --load names (a run directory's newest one) and whether it is resumed."""
    if load is None:
        return None, False
    if not os.path.isdir(load):
        raise ValueError(f"--load: checkpoint directory {load} does not exist")
    resume = latest_iteration_dir(load)
    return (resume, True) if resume is not None else (Path(load), False)


def recorded(directory: Path | None) -> CheckpointRecords | None:
    """--load's records (checkpoint/records.py's one policy; None for no --load, or a directory that is no
    torch_dist checkpoint: loading it later fails with its own message)."""
    if directory is None:
        return None
    try:
        return read_records(directory, required=False)
    except CheckpointError as e:
        raise ValueError(f"--load: {e}") from e


def inherit_architecture(cfg: TrainConfig, record: dict[str, Any], where: str, resuming: bool) -> None:
    """Fill the architecture flags left out from `record`; refuse one that differs."""
    theirs = LlamaArgs.from_json(record, where=f"{where}: model_args")
    arch, method = cfg.model.architecture, cfg.method
    kind = method_class(method.name)
    if arch.num_layers is None and resuming:  # a run's record counts its own model's layers
        arch.num_layers = kind.base_layers_of(theirs.num_layers, method)
    for name, flag in FLAGS.items():
        value = getattr(theirs, name)
        if getattr(arch, name) is None:
            setattr(arch, name, value)
            continue
        if name in CARRIED_ONLY or (name == "rope_scaling_factor" and not theirs.rope_scaling):
            continue
        mine = getattr(arch, name)
        if name == "num_layers" and resuming:
            mine = kind.grown_layers(mine, method)
        if mine != value:
            raise ValueError(f"{where}: the checkpoint's model has {name}={value!r} but {flag} gives {mine!r}; "
                             f"leave {flag} out to take the checkpoint's")


def check_resumed_schedule(cfg: TrainConfig, train_state: dict[str, Any], where: str) -> None:
    """megatron-core's scheduler asserts that a resumed run keeps its LR schedule: name the flag."""
    o, s = cfg.optim, cfg.schedule
    sched = train_state.get("scheduler") or {}
    iteration, consumed = int(train_state.get("iteration", 0)), int(train_state.get("consumed_samples", 0))
    gb = s.global_batch_size
    if iteration and consumed != iteration * gb:
        raise ValueError(f"{where}: the run being resumed used --global-batch-size {consumed // iteration}, not {gb}")
    decay = o.lr_decay_iters or s.train_iters
    mine = {
        "max_lr": ("--lr", o.lr, o.lr), "min_lr": ("--min-lr", o.min_lr, o.min_lr),
        "lr_warmup_steps": ("--lr-warmup-iters", o.lr_warmup_iters * gb, o.lr_warmup_iters),
        "lr_decay_steps": ("--lr-decay-iters" if o.lr_decay_iters else "--train-iters", decay * gb, decay),
        "lr_decay_style": ("--lr-decay-style", o.lr_decay_style, o.lr_decay_style),
        "start_wd": ("--weight-decay", o.weight_decay, o.weight_decay),
        "wd_incr_steps": ("--train-iters", s.train_iters * gb, s.train_iters),
    }
    for key, (flag, value, shown) in mine.items():
        if key in sched and sched[key] != value:
            was = sched[key] // gb if key.endswith("_steps") else sched[key]
            raise ValueError(f"{where}: the run being resumed has {flag} {was}, not {shown} "
                             "(megatron-core's LR schedule cannot change on resume)")
    recorded = train_state.get("optim") or {"decoupled_lr": None, "decoupled_min_lr": None}  # older runs: none
    for key, value in decoupled_record(o).items():
        if recorded.get(key) != value:
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"{where}: the run being resumed has {flag} {recorded.get(key)}, not {value} "
                             "(each parameter group's LR is restored from the checkpoint)")


def resolve_vocab(cfg: TrainConfig) -> None:
    """--vocab-size from the tokenizer when not given (padded as Megatron-LM pads it); a tokenizer
    with more tokens than the model has rows is refused."""
    m, arch = cfg.model, cfg.model.architecture
    if (m.tokenizer_type is None) != (m.tokenizer_model is None):
        raise ValueError("--tokenizer-type and --tokenizer-model go together")
    if m.tokenizer_model is None:
        return
    from megatron_scale.data.tokenizer import TokenizerSpec

    n = TokenizerSpec(m.tokenizer_type, m.tokenizer_model).load().vocab_size
    if arch.vocab_size is None:
        multiple = m.make_vocab_size_divisible_by * cfg.parallel.tp
        arch.vocab_size = -(-n // multiple) * multiple
    elif n > arch.vocab_size:
        raise ValueError(f"--tokenizer-model {m.tokenizer_model} has {n} tokens but the model's --vocab-size is "
                         f"{arch.vocab_size}: token ids would index past the embedding")


def check_shape(arch: dict[str, Any], seq_length: int, tp: int) -> None:
    """Head, group, FFN and vocabulary sizes against each other and TP (megatron-core asserts)."""
    heads = arch["num_attention_heads"]
    groups = arch.get("num_query_groups") or heads
    if heads % groups:
        raise ValueError(f"--num-attention-heads {heads} is not divisible by --num-query-groups {groups}")
    if arch.get("kv_channels") is None and arch["hidden_size"] % heads:
        raise ValueError(f"--hidden-size {arch['hidden_size']} is not divisible by --num-attention-heads {heads} "
                         "(give --kv-channels for another head size)")
    for flag, value in (("--num-attention-heads", heads), ("--num-query-groups", groups),
                        ("--ffn-hidden-size", arch["ffn_hidden_size"]), ("--vocab-size", arch.get("vocab_size"))):
        if value is not None and value % tp:
            raise ValueError(f"{flag} {value} is not divisible by --tensor-model-parallel-size {tp}")
    context = arch.get("max_position_embeddings")
    if context is not None and seq_length > context:
        raise ValueError(f"--seq-length {seq_length} exceeds the model's --max-position-embeddings {context} "
                         "(give a larger --max-position-embeddings to extend the context on purpose)")


def architecture(cfg: TrainConfig) -> LlamaArgs:
    """The base's LlamaArgs from the (completed) architecture flags and their defaults."""
    try:
        return LlamaArgs.from_flags(given(cfg.model.architecture), max_position_default=cfg.schedule.seq_length,
                                    params_dtype="bfloat16" if cfg.model.bf16 else "float32")
    except ArchitectureError as e:
        raise ValueError(str(e)) from e


def build_method(cfg: TrainConfig, arch: LlamaArgs, records: CheckpointRecords | None = None, where: str = "",
                 resuming: bool = False) -> TrainingMethod:
    """The method --method, its flags and --load's records describe (its class plans it: from a
    checkpoint of its own, the recorded method; checked, naming the flag)."""
    name = cfg.method.name
    method = method_class(name).plan(Given(
        name=name, flags=cfg.method, arch=arch, tp=cfg.parallel.tp, sequence_parallel=cfg.parallel.sequence_parallel,
        seed=cfg.schedule.seed, transformer_impl=cfg.model.transformer_impl, records=records, resuming=resuming,
        where=where,
    ))
    method.check_base_backward(cfg.method.scale.base_backward)
    return method


def _plan(cfg: TrainConfig, world_size: int) -> Plan:
    source, resuming = load_source(cfg.checkpoint.load)
    records = recorded(source)
    where = f"--load {source}"
    loaded = records.model_args if records else None
    if loaded is not None:
        inherit_architecture(cfg, loaded, where, resuming)
    method_class(cfg.method.name).refuse_records(records, cfg.method.name, where, resuming)
    resolve_vocab(cfg)
    arch = architecture(cfg)  # the four sizes are there (or the one message naming those missing)
    check_shape(given(cfg.model.architecture), cfg.schedule.seq_length, cfg.parallel.tp)
    if resuming and (records is None or records.train_state is None):
        raise ValueError(f"{where}: a model checkpoint without training state; cannot resume from it")
    if resuming:
        check_resumed_schedule(cfg, records.train_state, where)

    dp = cfg.parallel.data_parallel_size(world_size)
    par = cfg.parallel
    layout = run_layout(par.tp, par.pp, dp, par.use_distributed_optimizer)
    saved = records.layout if resuming and records else None
    reshard = check_resume(saved, layout, where) if resuming else None
    cfg.schedule.validate(dp)
    cfg.optim.validate(cfg.schedule.train_iters)
    method = build_method(cfg, arch, records, where, resuming)
    needs = method.tokenizer_reason()
    if needs and cfg.model.tokenizer_model is None:
        raise ValueError(f"{needs}: give --tokenizer-type and --tokenizer-model")
    cfg.logging.validate(cfg.method.name, method.routes, cfg.schedule.train_iters)
    layers = method.model_layers(arch.num_layers)
    if layers % cfg.parallel.pp:
        raise ValueError(f"--num-layers {layers} (model layers) is not divisible by --pipeline-model-parallel-size "
                         f"{cfg.parallel.pp}")
    cfg.data.validate()
    cfg.checkpoint.validate(cfg.schedule.train_iters)
    cfg.validate_te()
    record = dataclasses.replace(arch, num_layers=layers)
    if loaded is not None:
        record = dataclasses.replace(record, hf_carry=LlamaArgs.from_json(loaded).hf_carry)
    return Plan(config=cfg, architecture=arch, method=method, resume=source if resuming else None,
                initial=None if resuming else source, record=record.to_json(), data_parallel_size=dp,
                layout=layout, resumed_layout=saved, reshard=reshard, records=records)


def plan(config: TrainConfig, world_size: int) -> Plan:
    """Complete `config` from --load (a copy: `config` is not changed) and check it all; raises
    FlagError naming the flag."""
    try:
        return _plan(copy.deepcopy(config), world_size)
    except ValueError as e:
        raise FlagError(str(e)) from e

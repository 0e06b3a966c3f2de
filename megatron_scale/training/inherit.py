"""What --load records supplies the model: a run from a recorded checkpoint needs no
architecture, --scale-* or LoRA flags.

Conversion, upscaling and training record the model in a checkpoint's common state:
`model_args` (LlamaArgs, Megatron-LM's flag names), `scale.dims` (the SCALE geometry) and
`scale.lora` (LoRA rank and alpha). Before any process group exists, `inherit_from_load(args)`
fills each of those flags the user left out from the record, and refuses a given flag that
describes another model, in one message naming the flag. Flags describing the new run (method,
LR, data, batch, parallel layout) stay the user's. Without a record (no --load, or a checkpoint
that records nothing) the flags' own defaults apply and the four sizes must be given.
A run being resumed also carries its LR schedule, which megatron-core's scheduler only asserts
on: a flag that changes it is refused here, by name.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint import latest_iteration_dir
from megatron_scale.cli import SCALE_FLAGS, scale_config_from_args
from megatron_scale.convert.llama import scale_config_from_record
from megatron_scale.convert.model_args import LlamaArgs
from megatron_scale.training.arguments import apply_defaults, llama_pro_blocks
from megatron_scale.training.model_args import FLAGS, from_flags

# LlamaArgs fields taken from the record but never compared: a run may extend its context.
CARRIED_ONLY = {"max_position_embeddings": "--max-position-embeddings"}
# ScaleDims record field -> the flag that sets it
DIMS_FLAGS = {
    "num_layers": "--num-layers", "hidden": "--hidden-size", "heads": "--num-attention-heads",
    "groups": "--num-query-groups", "head_dim": "--kv-channels", "ffn": "--ffn-hidden-size",
    "variant": "--method", **{f: "--" + a.replace("_", "-") for f, a in SCALE_FLAGS.items()},
}


def _attr(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def load_source(args: argparse.Namespace) -> tuple[Path | None, bool]:
    """The checkpoint --load names (a run directory's newest one) and whether it is resumed."""
    if args.load is None:
        return None, False
    if not os.path.isdir(args.load):
        raise ValueError(f"--load: checkpoint directory {args.load} does not exist")
    resume = latest_iteration_dir(args.load)
    return (resume, True) if resume is not None else (Path(args.load), False)


def _common_state(directory: Path) -> dict[str, Any]:
    """The checkpoint's common state ({} for a directory that is no torch_dist checkpoint:
    loading it later fails with its own message)."""
    if not (directory / ".metadata").is_file() or (directory / "common.pt").exists():
        return {}
    return mc.dist_checkpointing.load_common_state_dict(str(directory))


def _base_layers(recorded: int, args: argparse.Namespace) -> int:
    """--num-layers (the base's) of a resumed LLaMA-Pro run whose record counts the grown model."""
    if args.llama_pro_blocks is not None:
        return recorded - args.llama_pro_blocks
    for layers in range(1, recorded):  # layers + max(1, layers // 4) grows strictly with layers
        if layers + max(1, layers // 4) == recorded:
            return layers
    raise ValueError(f"--load: {recorded} layers is no LLaMA-Pro growth of a base; give --num-layers and --llama-pro-blocks")


def inherit_model_args(args: argparse.Namespace, record: dict[str, Any], where: str, resuming: bool) -> None:
    """Fill the architecture flags left out from `record`; refuse one that differs."""
    theirs = LlamaArgs.from_json(record, where=f"{where}: model_args")
    grown = args.method == "llama-pro" and resuming
    if args.num_layers is None and grown:
        args.num_layers = _base_layers(theirs.num_layers, args)
    for field, flag in {**FLAGS, **CARRIED_ONLY}.items():
        value, attr = getattr(theirs, field), _attr(flag)
        if getattr(args, attr) is None:
            setattr(args, attr, value)
            continue
        if field in CARRIED_ONLY or (field == "rope_scaling_factor" and not theirs.rope_scaling):
            continue
        mine = getattr(args, attr)
        if field == "num_layers" and grown:
            mine += llama_pro_blocks(args)
        if mine != value:
            raise ValueError(f"{where}: the checkpoint's model has {field}={value!r} but {flag} gives {mine!r}; "
                             f"leave {flag} out to take the checkpoint's")


def inherit_scale(args: argparse.Namespace, dims: dict[str, Any] | None, where: str, resuming: bool) -> None:
    """A SCALE checkpoint supplies the --scale-* settings and the variant; a plain one is a base
    to upscale on load, unless it is a run being resumed."""
    scale = args.method.startswith("scale-")
    if dims is None:
        if scale and resuming:
            raise ValueError(f"{where}: a run of a plain model; --method {args.method} cannot resume it")
        return
    if not scale:
        raise ValueError(f"{where}: holds a SCALE-{dims['variant']} model; train it with --method scale-{dims['variant']}, "
                         f"not --method {args.method}")
    for field, value in vars(scale_config_from_record(dims)).items():
        attr = SCALE_FLAGS.get(field)
        if attr is not None and getattr(args, attr) is None:
            setattr(args, attr, value)
    model = from_flags(args, args.num_layers)
    mine = scale_config_from_args(args, args.method.removeprefix("scale-")).resolve(
        model.transformer_config(args.tensor_model_parallel_size), args.tensor_model_parallel_size).to_record()
    for field, value in dims.items():
        if mine.get(field) != value:
            flag = DIMS_FLAGS.get(field, field)
            shown = args.method if flag == "--method" else mine.get(field)
            raise ValueError(f"{where}: the checkpoint's SCALE model has {field}={value!r} but {flag} gives {shown!r}"
                             + ("" if flag == "--method" else f"; leave {flag} out to take the checkpoint's"))


def inherit_lora(args: argparse.Namespace, lora: dict[str, Any] | None, where: str, resuming: bool) -> None:
    """A LoRA checkpoint supplies --lora-rank and --lora-alpha; a given one that differs is refused."""
    if lora is not None and args.method != "lora":
        raise ValueError(f"{where}: holds LoRA adapters; load it with --method lora "
                         "(merging them into the base weights is not supported)")
    if lora is not None:
        for key in ("rank", "alpha"):
            attr, flag = f"lora_{key}", f"--lora-{key}"
            if getattr(args, attr) is None:
                setattr(args, attr, lora[key])
            elif float(getattr(args, attr)) != float(lora[key]):
                raise ValueError(f"{where}: the checkpoint's LoRA adapters have {key} {lora[key]!r} but {flag} gives "
                                 f"{getattr(args, attr)!r}; leave {flag} out to take the checkpoint's")
    elif resuming and args.method == "lora":
        raise ValueError(f"{where}: a run of a model without LoRA adapters; --method lora cannot resume it")


def check_resumed_schedule(args: argparse.Namespace, train_state: dict[str, Any], where: str) -> None:
    """megatron-core's scheduler asserts that a resumed run keeps its LR schedule: name the flag."""
    sched = train_state.get("scheduler") or {}
    iteration, consumed = int(train_state.get("iteration", 0)), int(train_state.get("consumed_samples", 0))
    gb = args.global_batch_size
    if iteration and consumed != iteration * gb:
        raise ValueError(f"{where}: the run being resumed used --global-batch-size {consumed // iteration}, not {gb}")
    decay = args.lr_decay_iters or args.train_iters
    mine = {
        "max_lr": ("--lr", args.lr, args.lr), "min_lr": ("--min-lr", args.min_lr, args.min_lr),
        "lr_warmup_steps": ("--lr-warmup-iters", args.lr_warmup_iters * gb, args.lr_warmup_iters),
        "lr_decay_steps": ("--lr-decay-iters" if args.lr_decay_iters else "--train-iters", decay * gb, decay),
        "lr_decay_style": ("--lr-decay-style", args.lr_decay_style, args.lr_decay_style),
        "start_wd": ("--weight-decay", args.weight_decay, args.weight_decay),
        "wd_incr_steps": ("--train-iters", args.train_iters * gb, args.train_iters),
    }
    for key, (flag, value, shown) in mine.items():
        if key in sched and sched[key] != value:
            was = sched[key] // gb if key.endswith("_steps") else sched[key]
            raise ValueError(f"{where}: the run being resumed has {flag} {was}, not {shown} "
                             "(megatron-core's LR schedule cannot change on resume)")


def inherit_from_load(args: argparse.Namespace) -> None:
    """Everything --load records, applied to `args` (see the module docstring)."""
    source, resuming = load_source(args)
    common = _common_state(source) if source is not None else {}
    where = f"--load {source}"
    if common.get("model_args") is not None:
        inherit_model_args(args, common["model_args"], where, resuming)
    scale = common.get("scale") or {}
    inherit_lora(args, scale.get("lora"), where, resuming)
    apply_defaults(args)
    if common:
        inherit_scale(args, scale.get("dims"), where, resuming)
    if resuming and "train_state" in common:
        check_resumed_schedule(args, common["train_state"], where)

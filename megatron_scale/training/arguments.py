"""Command-line arguments of `python -m megatron_scale.train`, with Megatron-LM's flag names.

Flags that mean what they mean in Megatron-LM keep its names (--tensor-model-parallel-size,
--micro-batch-size, --global-batch-size, --lr, --data-path, --load, --save, ...). SCALE's own
flags start with --scale-; the method and baselines have --method and their own few flags.
`validate(args, world_size)` checks everything that can be checked before a process group
exists, each failure one message that names the flag.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from megatron_scale.cli import add_scale_arguments, scale_config_from_args
from megatron_scale.config import ROUTER_STATISTICS, ScaleConfig, check_router
from megatron_scale.model.te import FP8_FORMATS, FP8_RECIPES, check_te_flags

# Model flags whose default applies only where --load records no value (training/inherit.py).
ARCH_DEFAULTS = {"rotary_base": 10000.0, "use_rope_scaling": False, "rope_scaling_factor": 8.0, "norm_epsilon": 1e-5,
                 "untie_embeddings_and_output_weights": False}
LORA_DEFAULTS = {"lora_rank": 8, "lora_alpha": 16.0}
REQUIRED_ARCH = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")
METHODS = ("scale-preserve", "scale-adapt", "scale-route", "full", "freeze", "llama-pro", "lora")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="megatron-scale-train",
        description="Continual pre-training with SCALE (or a baseline) on Megatron-Core.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("model (Megatron-LM names; taken from --load when it records them)")
    g.add_argument("--num-layers", type=int, default=None, help="needed unless --load records the model")
    g.add_argument("--hidden-size", type=int, default=None, help="needed unless --load records the model")
    g.add_argument("--num-attention-heads", type=int, default=None, help="needed unless --load records the model")
    g.add_argument("--num-query-groups", type=int, default=None, help="GQA groups (default: heads)")
    g.add_argument("--ffn-hidden-size", type=int, default=None, help="needed unless --load records the model")
    g.add_argument("--kv-channels", type=int, default=None, help="head size (default: hidden / heads)")
    g.add_argument("--vocab-size", type=int, default=None,
                   help="model vocabulary size (default: the tokenizer's, padded to --make-vocab-size-divisible-by x TP)")
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    g.add_argument("--tokenizer-type", choices=("HuggingFaceTokenizer", "SentencePieceTokenizer"), default=None)
    g.add_argument("--tokenizer-model", default=None, help="tokenizer.json, a folder holding one, or a .model")
    g.add_argument("--max-position-embeddings", type=int, default=None, help="default: --seq-length")
    g.add_argument("--rotary-base", type=float, default=None, help=f"RoPE theta (default {ARCH_DEFAULTS['rotary_base']:g})")
    g.add_argument("--use-rope-scaling", action="store_true", default=None, help="Llama 3.x RoPE frequency scaling")
    g.add_argument("--rope-scaling-factor", type=float, default=None,
                   help=f"with --use-rope-scaling (default {ARCH_DEFAULTS['rope_scaling_factor']:g})")
    g.add_argument("--norm-epsilon", type=float, default=None, help=f"default {ARCH_DEFAULTS['norm_epsilon']:g}")
    g.add_argument("--untie-embeddings-and-output-weights", action="store_true", default=None)
    g.add_argument("--init-method-std", type=float, default=0.02)

    g = p.add_argument_group("method")
    g.add_argument("--method", choices=METHODS, default="scale-preserve")
    g.add_argument("--freeze-layers", type=int, default=3, help="freeze: bottom layers frozen (+ input embedding)")
    g.add_argument("--llama-pro-blocks", type=int, default=None,
                   help="llama-pro: blocks inserted (default num-layers/4); --num-layers stays the base's")
    g.add_argument("--lora-rank", type=int, default=None, help="lora: rank r of every adapter (default 8)")
    g.add_argument("--lora-alpha", type=float, default=None, help="lora: the update is scaled by alpha / r (default 16)")
    g.add_argument("--lora-dropout", type=float, default=0.0, help="lora: dropout on the adapters' input")

    add_scale_arguments(p.add_argument_group("SCALE (--scale-*)"))

    g = p.add_argument_group("parallelism")
    g.add_argument("--tensor-model-parallel-size", type=int, default=1)
    g.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    g.add_argument("--sequence-parallel", action="store_true")
    g.add_argument("--use-distributed-optimizer", action="store_true")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")

    g = p.add_argument_group("training")
    g.add_argument("--micro-batch-size", type=int, required=True)
    g.add_argument("--global-batch-size", type=int, required=True)
    g.add_argument("--seq-length", type=int, required=True)
    g.add_argument("--train-iters", type=int, required=True)
    g.add_argument("--lr", type=float, required=True)
    g.add_argument("--min-lr", type=float, default=0.0)
    g.add_argument("--lr-decay-style", choices=("constant", "linear", "cosine"), default="cosine")
    g.add_argument("--lr-warmup-iters", type=int, default=0)
    g.add_argument("--lr-decay-iters", type=int, default=None, help="default: --train-iters")
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--clip-grad", type=float, default=1.0)
    g.add_argument("--adam-beta1", type=float, default=0.9)
    g.add_argument("--adam-beta2", type=float, default=0.95)
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--bf16", action="store_true")
    g.add_argument("--transformer-impl", choices=("local", "transformer_engine"), default="local",
                   help="local: the fused SCALE linears (any device); transformer_engine: TE GEMMs and "
                   "attention (CUDA, Transformer Engine installed; needed for FP8)")
    g.add_argument("--fp8-format", choices=FP8_FORMATS, default=None,
                   help="FP8 GEMMs through Transformer Engine (with --bf16 and --transformer-impl transformer_engine)")
    g.add_argument("--fp8-recipe", choices=FP8_RECIPES, default=None, help="with --fp8-format; default delayed")
    g.add_argument("--gradient-accumulation-fusion", action="store_true",
                   help="TE accumulates weight gradients straight into the fp32 main_grad buffers "
                   "(--transformer-impl transformer_engine)")
    g.add_argument("--skip-nan", action="store_true", help="skip a step whose loss is NaN/inf instead of stopping")

    g = p.add_argument_group("data")
    g.add_argument("--data-path", nargs="+", required=True, help="PREFIX or 'W1 PREFIX1 W2 PREFIX2 ...'")
    g.add_argument("--split", default="98,2,0")
    g.add_argument("--eval-data-path", nargs="*", default=[], help="NAME=PREFIX ... evaluated separately")
    g.add_argument("--data-cache-path", default=None)

    g = p.add_argument_group("checkpointing and logging")
    g.add_argument("--load", default=None, help="SCALE checkpoint dir, or a base checkpoint (+ --scale-*)")
    g.add_argument("--save", default=None)
    g.add_argument("--save-interval", type=int, default=None)
    g.add_argument("--eval-interval", type=int, default=None,
                   help="evaluate every N iterations, and before the first (the 'before' numbers) unless "
                   "--no-eval-at-start or resuming")
    g.add_argument("--no-eval-at-start", dest="eval_at_start", action="store_false",
                   help="with --eval-interval: no evaluation at iteration 0")
    g.add_argument("--eval-iters", type=int, default=2)
    g.add_argument("--route-tau", type=float, default=None,
                   help="scale-route: evaluate with this tau instead of the model's (checkpoints keep theirs)")
    g.add_argument("--route-statistic", choices=ROUTER_STATISTICS, default=None,
                   help="scale-route: evaluate with this router statistic instead of the model's")
    g.add_argument("--log-interval", type=int, default=1)
    g.add_argument("--metrics-file", default=None, help="JSONL metrics (default: <save>/metrics.jsonl)")
    g.add_argument("--tensorboard-dir", default=None)
    g.add_argument("--exit-signal-save", action="store_true", help="on SIGTERM/SIGINT save before exiting")
    g.add_argument("--exit-interval", type=int, default=None,
                   help="stop (saving first, with --save) once the iteration is a multiple of this; "
                   "--train-iters keeps fixing the LR schedule, so a later run resumes the same schedule")

    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def scale_config(args: argparse.Namespace) -> ScaleConfig:
    return scale_config_from_args(args, args.method.removeprefix("scale-"))


def llama_pro_blocks(args: argparse.Namespace) -> int:
    return args.llama_pro_blocks if args.llama_pro_blocks is not None else max(1, args.num_layers // 4)


def data_blend(paths: Sequence[str]) -> tuple[list[str], list[float] | None]:
    """'PREFIX' or 'W1 P1 W2 P2 ...' -> (prefixes, weights), as Megatron-LM parses --data-path."""
    if len(paths) == 1:
        return [paths[0]], None
    if len(paths) % 2:
        raise ValueError(f"--data-path: expected 'WEIGHT PREFIX' pairs, got {list(paths)}")
    try:
        weights = [float(w) for w in paths[0::2]]
    except ValueError as e:
        raise ValueError(f"--data-path: weights must be numbers: {list(paths)}") from e
    return list(paths[1::2]), weights


def eval_sets(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, prefix = item.partition("=")
        if not sep or not name or not prefix:
            raise ValueError(f"--eval-data-path: expected NAME=PREFIX, got {item!r}")
        out[name] = prefix
    return out


def _check_prefix(flag: str, prefix: str) -> None:
    missing = [s for s in (".bin", ".idx") if not os.path.exists(prefix + s)]
    if missing:
        raise ValueError(f"{flag}: dataset {prefix} has no {' / '.join(prefix + s for s in missing)}")


def resolve_vocab(args: argparse.Namespace) -> None:
    """Set --vocab-size from the tokenizer when not given (padded as Megatron-LM pads it), and
    refuse a tokenizer with more tokens than the model has rows."""
    if (args.tokenizer_type is None) != (args.tokenizer_model is None):
        raise ValueError("--tokenizer-type and --tokenizer-model go together")
    if args.tokenizer_model is None:
        if args.vocab_size is None:
            raise ValueError("--vocab-size is needed when no --tokenizer-model is given")
        return
    from megatron_scale.data.tokenizer import TokenizerSpec

    n = TokenizerSpec(args.tokenizer_type, args.tokenizer_model).load().vocab_size
    if args.vocab_size is None:
        multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
        args.vocab_size = -(-n // multiple) * multiple
    elif n > args.vocab_size:
        raise ValueError(f"--tokenizer-model {args.tokenizer_model} has {n} tokens but the model's --vocab-size is "
                         f"{args.vocab_size}: token ids would index past the embedding")


def _validate_te(args: argparse.Namespace) -> None:
    """The Transformer Engine and FP8 flags (model/te.py's check), and what training adds."""
    te = args.transformer_impl == "transformer_engine"
    if args.gradient_accumulation_fusion and not te:
        raise ValueError("--gradient-accumulation-fusion needs --transformer-impl transformer_engine")
    if te and args.method == "lora":
        raise ValueError("--method lora: not with --transformer-impl transformer_engine "
                         "(the adapters wrap megatron-core's local linears)")
    check_te_flags(args.transformer_impl, args.fp8_format, args.fp8_recipe, args.bf16, args.device)


def apply_defaults(args: argparse.Namespace) -> None:
    """The defaults of the model flags that neither the user nor --load's record set
    (training/inherit.py); the four sizes have none."""
    for attr, value in {**ARCH_DEFAULTS, **LORA_DEFAULTS}.items():
        if getattr(args, attr) is None:
            setattr(args, attr, value)
    missing = ["--" + a.replace("_", "-") for a in REQUIRED_ARCH if getattr(args, a) is None]
    if missing:
        raise ValueError(f"{', '.join(missing)} needed: give them, or --load a checkpoint that records its model "
                         "(converted, upscaled or trained)")


def _positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be at least 1")


def validate_schedule(args: argparse.Namespace) -> None:
    """The iteration counts, batch sizes, LR schedule and optimizer settings, which megatron-core
    only asserts on (OptimizerParamScheduler: warm-up below the decay horizon, min LR <= LR)."""
    _positive(args, "train_iters", "micro_batch_size", "global_batch_size", "seq_length", "log_interval",
              "eval_iters", "lr_decay_iters", "save_interval", "eval_interval", "exit_interval")
    if args.lr < 0 or args.min_lr < 0:
        raise ValueError(f"--lr {args.lr} / --min-lr {args.min_lr}: learning rates must be >= 0")
    if args.min_lr > args.lr:
        raise ValueError(f"--min-lr {args.min_lr} is above --lr {args.lr}")
    if args.lr_warmup_iters < 0:
        raise ValueError(f"--lr-warmup-iters {args.lr_warmup_iters}: must be >= 0")
    horizon = ("--lr-decay-iters", args.lr_decay_iters) if args.lr_decay_iters else ("--train-iters", args.train_iters)
    if args.lr_warmup_iters >= horizon[1]:
        raise ValueError(f"--lr-warmup-iters {args.lr_warmup_iters} must be below {horizon[0]} {horizon[1]} "
                         "(warm-up ends before the LR decays)")
    if args.weight_decay < 0 or args.clip_grad < 0:
        raise ValueError(f"--weight-decay {args.weight_decay} / --clip-grad {args.clip_grad}: must be >= 0")
    for flag, beta in (("--adam-beta1", args.adam_beta1), ("--adam-beta2", args.adam_beta2)):
        if not 0 <= beta < 1:
            raise ValueError(f"{flag} {beta}: must lie in [0, 1)")
    parts = args.split.replace("/", ",").split(",")
    try:
        weights = [float(x) for x in parts]
    except ValueError:
        weights = []
    if not 1 <= len(weights) <= 3 or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"--split {args.split!r}: expected up to three non-negative weights, e.g. 98,2,0")


def validate_shape(args: argparse.Namespace, tp: int) -> None:
    """Head, group, FFN and vocabulary sizes against each other and TP (megatron-core asserts)."""
    heads, groups = args.num_attention_heads, args.num_query_groups or args.num_attention_heads
    if heads % groups:
        raise ValueError(f"--num-attention-heads {heads} is not divisible by --num-query-groups {groups}")
    if args.kv_channels is None and args.hidden_size % heads:
        raise ValueError(f"--hidden-size {args.hidden_size} is not divisible by --num-attention-heads {heads} "
                         "(give --kv-channels for another head size)")
    for flag, value in (("--num-attention-heads", heads), ("--num-query-groups", groups),
                        ("--ffn-hidden-size", args.ffn_hidden_size), ("--vocab-size", args.vocab_size)):
        if value % tp:
            raise ValueError(f"{flag} {value} is not divisible by --tensor-model-parallel-size {tp}")
    context = args.max_position_embeddings
    if context is not None and args.seq_length > context:
        raise ValueError(f"--seq-length {args.seq_length} exceeds the model's --max-position-embeddings {context} "
                         "(give a larger --max-position-embeddings to extend the context on purpose)")


def validate(args: argparse.Namespace, world_size: int) -> None:
    """Everything checkable before a process group exists. Raises ValueError naming the flag."""
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    if world_size % (tp * pp):
        raise ValueError(
            f"world size {world_size} is not divisible by --tensor-model-parallel-size {tp} x "
            f"--pipeline-model-parallel-size {pp}"
        )
    dp = world_size // (tp * pp)
    apply_defaults(args)
    validate_schedule(args)
    resolve_vocab(args)
    validate_shape(args, tp)
    if args.global_batch_size % (args.micro_batch_size * dp):
        raise ValueError(
            f"--global-batch-size {args.global_batch_size} is not divisible by --micro-batch-size "
            f"{args.micro_batch_size} x data-parallel size {dp}"
        )
    layers = args.num_layers
    if args.method == "llama-pro":
        from megatron_scale.upscale.depth import new_block_indices

        layers += len(new_block_indices(args.num_layers, llama_pro_blocks(args)))
    if layers % pp:
        raise ValueError(f"--num-layers {layers} (model layers) is not divisible by --pipeline-model-parallel-size {pp}")
    if args.sequence_parallel and tp == 1:
        raise ValueError("--sequence-parallel needs --tensor-model-parallel-size > 1")
    prefixes, _ = data_blend(args.data_path)
    for prefix in prefixes:
        _check_prefix("--data-path", prefix)
    for name, prefix in eval_sets(args.eval_data_path).items():
        _check_prefix(f"--eval-data-path {name}", prefix)
    if args.load is not None and not os.path.isdir(args.load):
        raise ValueError(f"--load: checkpoint directory {args.load} does not exist")
    _validate_te(args)
    for flag, given in (("--save-interval", args.save_interval is not None), ("--exit-signal-save", args.exit_signal_save)):
        if given and args.save is None:
            raise ValueError(f"{flag} needs --save")
    if args.method == "freeze" and not 0 <= args.freeze_layers <= args.num_layers:
        raise ValueError(f"--freeze-layers {args.freeze_layers} must lie in 0..--num-layers {args.num_layers}")
    if args.method == "lora":
        from megatron_scale.model.lora import LoraSettings

        LoraSettings(rank=args.lora_rank, alpha=args.lora_alpha, dropout=args.lora_dropout)  # raises naming the flag
        if args.sequence_parallel:
            raise ValueError("--sequence-parallel is not supported with --method lora")
    if (args.route_tau is not None or args.route_statistic is not None) and args.method != "scale-route":
        flag = "--route-tau" if args.route_tau is not None else "--route-statistic"
        raise ValueError(f"{flag}: only a --method scale-route model routes; this run is --method {args.method}")
    if args.route_tau is not None:
        check_router(args.route_tau, "cosine", "--route-tau", "--route-statistic")
    if args.method.startswith("scale-"):
        from megatron_scale.training.model import base_transformer_config

        scale_config(args).resolve(base_transformer_config(args), tp)

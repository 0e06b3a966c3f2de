"""The architecture a run trains, recorded in its checkpoints and checked against --load.

Every run checkpoint records `model_args` (LlamaArgs' fields, Megatron-LM's flag names) in its
common state, as the conversion tools do, so `tools/convert_megatron_to_hf.py` exports a trained
checkpoint without being told its shape. When --load records model arguments (a converted base,
an upscaled checkpoint, an earlier run), the flags must describe the same function: a differing
width, RoPE setting or norm epsilon stops the run naming the flag, before any model is built.
Settings that do not change the function (the context the model was configured for, HF token
ids) are carried over from the loaded record.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from megatron_scale import _mcore as mc
from megatron_scale.convert.model_args import LlamaArgs
from megatron_scale.training.arguments import llama_pro_blocks

# LlamaArgs field -> the training flag that sets it; these define the function a model computes.
FLAGS = {
    "num_layers": "--num-layers", "hidden_size": "--hidden-size",
    "num_attention_heads": "--num-attention-heads", "num_query_groups": "--num-query-groups",
    "ffn_hidden_size": "--ffn-hidden-size", "kv_channels": "--kv-channels", "vocab_size": "--vocab-size",
    "rotary_base": "--rotary-base", "rope_scaling": "--use-rope-scaling",
    "rope_scaling_factor": "--rope-scaling-factor", "norm_epsilon": "--norm-epsilon",
    "untie_embeddings_and_output_weights": "--untie-embeddings-and-output-weights",
}


def recorded_model_args(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The `model_args` a checkpoint records, or None (also for a directory that is no torch_dist
    checkpoint: loading it then fails with its own message)."""
    if not os.path.isfile(os.path.join(directory, ".metadata")) or os.path.exists(os.path.join(directory, "common.pt")):
        return None
    return mc.dist_checkpointing.load_common_state_dict(str(directory)).get("model_args")


def from_flags(args: argparse.Namespace, num_layers: int) -> LlamaArgs:
    heads = args.num_attention_heads
    return LlamaArgs(
        num_layers=num_layers, hidden_size=args.hidden_size, num_attention_heads=heads,
        num_query_groups=args.num_query_groups or heads, ffn_hidden_size=args.ffn_hidden_size,
        kv_channels=args.kv_channels or args.hidden_size // heads, vocab_size=args.vocab_size,
        max_position_embeddings=args.max_position_embeddings or args.seq_length,
        rotary_base=float(args.rotary_base), rope_scaling=args.use_rope_scaling,
        rope_scaling_factor=float(args.rope_scaling_factor), norm_epsilon=args.norm_epsilon,
        untie_embeddings_and_output_weights=args.untie_embeddings_and_output_weights,
        params_dtype="bfloat16" if args.bf16 else "float32",
    )


def run_model_args(args: argparse.Namespace, loaded: dict[str, Any] | None, where: str, resuming: bool) -> dict[str, Any]:
    """The record this run's checkpoints carry. `loaded` is --load's record (None: nothing to
    check); a base loaded by llama-pro has the base's layer count, a resumed run the run's."""
    grown = llama_pro_blocks(args) if args.method == "llama-pro" else 0
    mine = from_flags(args, args.num_layers + grown)
    if loaded is None:
        return mine.to_json()
    theirs = LlamaArgs.from_json(loaded, where=f"{where}: model_args")
    expect = mine if resuming else dataclasses.replace(mine, num_layers=args.num_layers)
    for field, flag in FLAGS.items():
        if field == "rope_scaling_factor" and not (theirs.rope_scaling or expect.rope_scaling):
            continue
        if getattr(theirs, field) != getattr(expect, field):
            raise ValueError(
                f"{where}: the checkpoint's model has {field}={getattr(theirs, field)!r} but the flags give "
                f"{getattr(expect, field)!r} ({flag})"
            )
    carried = {"hf_carry": theirs.hf_carry}
    if args.max_position_embeddings is None:
        carried["max_position_embeddings"] = theirs.max_position_embeddings
    return dataclasses.replace(mine, **carried).to_json()

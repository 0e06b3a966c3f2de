"""Base megatron-core checkpoint -> SCALE checkpoint, offline, at any TP x PP layout.

    upscale_checkpoint("ckpt/base", "ckpt/scale", ScaleConfig(variant="route", init="svd"), tp=2)

Each rank loads the SCALE model from the base as training's --load does (methods/load.py
load_model with the Scale method: the base's global tensors through `upscale.upscale_state_dict`,
so both give the same model for a seed), and saves it (checkpoint/io.py save_checkpoint) with
the frozen base digest and geometry. The model arguments recorded with the base are carried over. Every
SCALE setting and the layout are checked before any rank starts.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from megatron_scale.checkpoint.io import save_checkpoint
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.scale_config import ScaleConfig, ScaleConfigError, ScaleDims, size_notes
from megatron_scale.convert import keymap
from megatron_scale.launch import on_ranks
from megatron_scale.convert.hf_config import ConversionError, conversion_errors, check_parallel
from megatron_scale.methods import Scale, recorded_method
from megatron_scale.methods.load import load_model
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Parallel


def _upscale_rank(base_dir: str, out_dir: str, args: LlamaArgs, dims: ScaleDims, tp: int, pp: int, *,
                  device: torch.device) -> None:
    method = Scale(dims=dims)
    model = load_model(base_dir, Parallel(tp=tp, pp=pp), device, method=method, args=args).model
    save_checkpoint(model, out_dir, method=method, model_args=args.to_json())


@conversion_errors()
def upscale_checkpoint(
    base_dir: str | os.PathLike, out_dir: str | os.PathLike, scale: ScaleConfig, *, tp: int = 1, pp: int = 1,
    model_args: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write the SCALE checkpoint; returns a summary (geometry, parameters, layout)."""
    reader = MegatronReader(base_dir)
    if recorded_method(reader.records).scale_dims is not None:
        raise ConversionError(f"--load {reader.dir}: already a SCALE checkpoint; upscale its base instead")
    args = reader.model_args(model_args)
    check_parallel(args, tp, pp)
    if args.vocab_size % tp:
        raise ConversionError(f"--tensor-model-parallel-size {tp} does not divide vocab_size={args.vocab_size}")
    reader.check_shapes(keymap.megatron_shapes(args))
    try:
        dims = scale.resolve(args.transformer_config(tp, pp), tp)
    except ScaleConfigError as e:
        raise ConversionError(str(e)) from e
    out = Path(out_dir)
    if out.exists():
        raise ConversionError(f"--save {out} exists; refusing to overwrite a checkpoint")
    on_ranks(_upscale_rank, tp, pp, str(reader.dir), str(out), args, dims, tp, pp)
    base_params = sum(math.prod(reader.shape(k)) for k in keymap.megatron_shapes(args))
    return {"output": str(out), "scale_dims": dims.to_record(), "size_notes": size_notes(scale, dims, tp),
            "base_parameters": base_params, "tensor_parallel": tp, "pipeline_parallel": pp}


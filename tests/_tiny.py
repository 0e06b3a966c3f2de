"""Tiny Llama-style models for tests: one global base state dict, loadable at any TP.

The architecture is a LlamaArgs record (ARGS), its TransformerConfig the product's
(LlamaArgs.transformer_config), its state dict keyed and shaped by the product's key table
(convert/keymap.py), and its models the product's: build_base and build_scale call build_model
with the method that trains them (Full; Scale at the geometry a ScaleConfig resolves to) at the
layout of the TransformerConfig they are given. Only a GPTModel keyword build_model does not take
(a layer backend, parallel_output) builds the SCALE model from build_scale_gpt directly.

The base weights are drawn once as full (global) tensors in checkpoint keys, so the TP=1 and
TP=2 models in a test are the same model, sharded differently. Call inside a process whose
megatron parallel state is initialised (tests/_dist.py spawns them). Models are built on the host
(use_cpu_initialization) and moved to the run's device, as training does; batches are made there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from megatron_scale import _mcore as mc
from megatron_scale.scale_config import ScaleConfig
from megatron_scale.convert.keymap import megatron_shapes
from megatron_scale.methods import Full, Scale
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Kernels, Parallel, build_model, build_scale_gpt
from megatron_scale.model.weights.state import load_global_state_dict
from megatron_scale.upscale import load_upscaled

VOCAB = 96
SEQ = 16
BATCH = 2
LAYERS = 4
HIDDEN, HEADS, GROUPS, FFN = 64, 16, 8, 128
HEAD_DIM = HIDDEN // HEADS
ARGS = LlamaArgs(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS,
                 ffn_hidden_size=FFN, kv_channels=HEAD_DIM, vocab_size=VOCAB, max_position_embeddings=SEQ)
"""The tiny base's architecture record (untied; `args(tied)` for either)."""
# std of each base tensor's random draw, by key suffix (norm weights: 1 + that)
STD = {"embedding.word_embeddings.weight": 0.5, "self_attention.linear_qkv.weight": 0.15,
       "mlp.linear_fc1.weight": 0.1, "output_layer.weight": 0.2}
NORM_STD = 0.1


def args(tied: bool) -> LlamaArgs:
    return dataclasses.replace(ARGS, untie_embeddings_and_output_weights=not tied)


def device() -> torch.device:
    """The device init_distributed chose for this rank (a GPU, or the CPU backend's cpu:0)."""
    from megatron_scale.distributed import run_device

    return run_device()


def base_config(tp: int = 1, pp: int = 1, **overrides: Any) -> Any:
    """The tiny base's TransformerConfig at TP/PP, as the product makes it (LlamaArgs), random
    init on; `overrides`: further TransformerConfig fields."""
    sp = overrides.pop("sequence_parallel", False)
    cfg = ARGS.transformer_config(tp, pp, sequence_parallel=sp, initialize=True, init_method_std=0.05)
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def base_state_dict(tied: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """Global base weights in the product's checkpoint keys and shapes (convert/keymap.py
    megatron_shapes; layers stacked on axis 0), the embedding drawn first."""
    g = torch.Generator().manual_seed(seed)
    shapes = megatron_shapes(args(tied))
    sd = {}
    for key in sorted(shapes, key=lambda k: k != "embedding.word_embeddings.weight"):
        if key.endswith(("layer_norm_weight", "final_layernorm.weight")):
            sd[key] = 1 + torch.randn(*shapes[key], generator=g) * NORM_STD
        else:
            std = next((v for suffix, v in STD.items() if key.endswith(suffix)), 0.05)
            sd[key] = torch.randn(*shapes[key], generator=g) * std
    return sd


KERNELS = Kernels(initialize=True, init_method_std=0.05)
"""How the tiny models' weights start (base_config's random init)."""


def layout(cfg: Any) -> Parallel:
    """The model-parallel layout of a TransformerConfig (base_config's)."""
    return Parallel(tp=cfg.tensor_model_parallel_size, pp=cfg.pipeline_model_parallel_size,
                    sequence_parallel=cfg.sequence_parallel)


def _stage_kwargs(gpt_kwargs: dict[str, Any]) -> None:
    """pre_process / post_process as a test passes them: what build_model gives this stage."""
    own = {"pre_process": mc.parallel_state.is_pipeline_first_stage(),
           "post_process": mc.parallel_state.is_pipeline_last_stage()}
    for key, value in gpt_kwargs.items():
        if key not in own or own[key] != value:
            raise ValueError(f"_tiny: {key}={value!r} is not what build_model builds here ({own})")


def build_base(cfg: Any, tied: bool, state: dict[str, torch.Tensor], **gpt_kwargs: Any) -> Any:
    """The base as build_model builds it for full / freeze / llama-pro (Full: every weight
    trains), at `cfg`'s layout, loaded with the global `state`."""
    _stage_kwargs(gpt_kwargs)
    model = build_model(args(tied), Full(), layout(cfg), KERNELS)
    load_global_state_dict(model, state)
    return model.to(device())


def build_scale(
    cfg: Any, scale: ScaleConfig, tied: bool, state: dict[str, torch.Tensor], **gpt_kwargs: Any
) -> Any:
    """The SCALE model `scale` resolves to on the base, as build_model builds it at `cfg`'s
    layout, upscaled from the global base `state` (upscale.load_upscaled)."""
    if {"backend", "parallel_output"} & gpt_kwargs.keys():  # GPTModel keywords build_model does not take
        model = build_scale_gpt(cfg, scale, vocab_size=VOCAB, max_sequence_length=SEQ, tied_embeddings=tied,
                                position_embedding_type="rope", **gpt_kwargs)
    else:
        _stage_kwargs(gpt_kwargs)
        method = Scale.of(scale, args(tied), cfg.tensor_model_parallel_size)
        model = build_model(args(tied), method, layout(cfg), KERNELS)
    load_upscaled(model, state)
    return model.to(device())


def batch(seed: int = 1) -> dict[str, torch.Tensor]:
    """A batch on this rank's device (drawn on the host from `seed`, so the same on any device)."""
    from megatron_scale.model.inputs import causal_mask, position_ids

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g).to(device())
    return {
        "input_ids": ids[:, :-1].contiguous(),
        "position_ids": position_ids(BATCH, SEQ, device()),
        "attention_mask": causal_mask(SEQ, device()),
        "labels": ids[:, 1:].contiguous(),
    }

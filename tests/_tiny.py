"""Tiny Llama-style models for tests: one global base state dict, loadable at any TP.

The base weights are drawn once as full (global) tensors in checkpoint keys, so the TP=1 and
TP=2 models in a test are the same model, sharded differently. Call inside a process whose
megatron parallel state is initialised (tests/_dist.py spawns them). Models are built on the host
(use_cpu_initialization) and moved to the run's device, as training does; batches are made there.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleConfig
from megatron_scale.model.builder import build_scale_gpt
from megatron_scale.model.state import load_global_state_dict
from megatron_scale.upscale import load_upscaled

VOCAB = 96
SEQ = 16
BATCH = 2
LAYERS = 4
HIDDEN, HEADS, GROUPS, FFN = 64, 16, 8, 128
HEAD_DIM = HIDDEN // HEADS


def device() -> torch.device:
    """The device init_distributed chose for this rank (a GPU, or the CPU backend's cpu:0)."""
    from megatron_scale.distributed import run_device

    return run_device()


def base_config(tp: int = 1, pp: int = 1, **overrides: Any) -> Any:
    kw: dict[str, Any] = dict(
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS,
        ffn_hidden_size=FFN, normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, bias_activation_fusion=False, hidden_dropout=0.0, attention_dropout=0.0,
        use_cpu_initialization=True, params_dtype=torch.float32, init_method_std=0.05,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
    )
    kw.update(overrides)
    return mc.TransformerConfig(**kw)


def base_state_dict(tied: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """Global base weights (checkpoint keys, layers stacked on axis 0)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, std: float = 0.05) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    qkv_rows = (HEADS + 2 * GROUPS) * HEAD_DIM
    sd = {
        "embedding.word_embeddings.weight": rnd(VOCAB, HIDDEN, std=0.5),
        "decoder.layers.self_attention.linear_qkv.layer_norm_weight": 1 + rnd(LAYERS, HIDDEN, std=0.1),
        "decoder.layers.self_attention.linear_qkv.weight": rnd(LAYERS, qkv_rows, HIDDEN, std=0.15),
        "decoder.layers.self_attention.linear_proj.weight": rnd(LAYERS, HIDDEN, HEADS * HEAD_DIM),
        "decoder.layers.mlp.linear_fc1.layer_norm_weight": 1 + rnd(LAYERS, HIDDEN, std=0.1),
        "decoder.layers.mlp.linear_fc1.weight": rnd(LAYERS, 2 * FFN, HIDDEN, std=0.1),
        "decoder.layers.mlp.linear_fc2.weight": rnd(LAYERS, HIDDEN, FFN),
        "decoder.final_layernorm.weight": 1 + rnd(HIDDEN, std=0.1),
    }
    if not tied:
        sd["output_layer.weight"] = rnd(VOCAB, HIDDEN, std=0.2)
    return sd


def build_base(cfg: Any, tied: bool, state: dict[str, torch.Tensor], **gpt_kwargs: Any) -> Any:
    model = mc.GPTModel(
        cfg, mc.get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=VOCAB,
        max_sequence_length=SEQ, share_embeddings_and_output_weights=tied,
        position_embedding_type="rope", **gpt_kwargs,
    )
    load_global_state_dict(model, state)
    return model.to(device())


def build_scale(
    cfg: Any, scale: ScaleConfig, tied: bool, state: dict[str, torch.Tensor], **gpt_kwargs: Any
) -> Any:
    model = build_scale_gpt(
        cfg, scale, vocab_size=VOCAB, max_sequence_length=SEQ, tied_embeddings=tied,
        position_embedding_type="rope", **gpt_kwargs,
    )
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

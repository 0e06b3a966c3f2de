"""Which model a run trains, per --method, and where its first weights come from.

    scale-preserve | scale-adapt | scale-route   the SCALE model (model/builder.py) from a base
    full                                          megatron-core's GPTModel, every weight trains
    freeze                                        GPTModel; the input embedding and the bottom
                                                  --freeze-layers layers frozen
    llama-pro                                     GPTModel with inserted identity blocks
                                                  (upscale/depth.py); only those train
    lora                                          GPTModel with LoRA (model/lora.py) on the four
                                                  linears of every layer; only the adapters train
A base checkpoint (any megatron-core GPT dist checkpoint, including a `full` run's) is read as
global tensors and, for SCALE, upscaled on load; a SCALE checkpoint loads as it is. A LoRA model
takes a base checkpoint (its adapters start fresh) or a LoRA one (adapters included).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch
import torch.nn.functional as F

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint import check_lora_record, is_scale_checkpoint, load_checkpoint, read_scale_record
from megatron_scale.model.builder import build_scale_gpt
from megatron_scale.model.lora import LoraSettings, init_lora_model, is_lora_key, lora_layer_spec
from megatron_scale.model.spec import llama_block_spec, llama_te_block_spec, te_backend
from megatron_scale.model.te import fp8_config
from megatron_scale.model.state import load_global_state_dict
from megatron_scale.training.arguments import llama_pro_blocks, scale_config
from megatron_scale.upscale import upscale_state_dict
from megatron_scale.upscale.depth import expand_depth, new_block_indices


def base_transformer_config(args: argparse.Namespace, num_layers: int | None = None) -> Any:
    """The base model's TransformerConfig (Llama family: RMSNorm, SwiGLU, no biases, RoPE)."""
    on_cpu = args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available())
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    return mc.TransformerConfig(
        num_layers=num_layers or args.num_layers, hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads, num_query_groups=args.num_query_groups,
        ffn_hidden_size=args.ffn_hidden_size, kv_channels=args.kv_channels,
        normalization="RMSNorm", layernorm_epsilon=args.norm_epsilon, gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, bias_activation_fusion=False,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=args.init_method_std,
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        sequence_parallel=args.sequence_parallel, params_dtype=dtype, pipeline_dtype=dtype,
        bf16=args.bf16, use_cpu_initialization=on_cpu,
        gradient_accumulation_fusion=args.gradient_accumulation_fusion,
        **fp8_config(args.fp8_format, args.fp8_recipe),
    )


def adopt_router_default(args: argparse.Namespace, source: str | os.PathLike) -> None:
    """A SCALE checkpoint's router default (tau, statistic) for the flags not given: training on
    from a calibrated checkpoint keeps its calibration."""
    if not args.method.startswith("scale-") or not is_scale_checkpoint(source):
        return
    dims = read_scale_record(source)["dims"]
    if args.scale_router_tau is None:
        args.scale_router_tau = float(dims.get("router_tau", 0.5))
    if args.scale_router_statistic is None:
        args.scale_router_statistic = dims.get("router_statistic", "cosine")


def build_model(args: argparse.Namespace) -> Any:
    """This rank's model chunk for --method (random weights; see `load_initial_weights`)."""
    layers = args.num_layers
    if args.method == "llama-pro":
        layers += llama_pro_blocks(args)
    cfg = base_transformer_config(args, layers)
    kwargs = dict(
        vocab_size=args.vocab_size,
        max_sequence_length=args.max_position_embeddings or args.seq_length,
        position_embedding_type="rope", rotary_base=args.rotary_base,
        rope_scaling=args.use_rope_scaling, rope_scaling_factor=args.rope_scaling_factor,
        pre_process=mc.parallel_state.is_pipeline_first_stage(),
        post_process=mc.parallel_state.is_pipeline_last_stage(),
    )
    tied = not args.untie_embeddings_and_output_weights
    te = args.transformer_impl == "transformer_engine"
    if args.method.startswith("scale-"):
        extra = {"backend": te_backend()} if te else {}
        return build_scale_gpt(cfg, scale_config(args), tied_embeddings=tied, **extra, **kwargs)
    if args.method == "lora":
        spec = lora_layer_spec(mc.get_gpt_layer_local_spec(normalization="RMSNorm"), lora_settings(args),
                               gated=cfg.gated_linear_unit)
    elif te:  # megatron-core's TE layer (norms fused into the linears)
        spec = llama_te_block_spec(cfg)
    else:  # megatron-core's local layer, with a norm that supports sequence parallelism
        spec = llama_block_spec(cfg)
    model = mc.GPTModel(cfg, spec, share_embeddings_and_output_weights=tied, **kwargs)
    if args.method == "lora":
        init_lora_model(model, lora_settings(args))
    if args.method == "freeze":
        freeze_bottom(model, args.freeze_layers)
    if args.method == "llama-pro":
        train_only_layers(model, set(new_block_indices(args.num_layers, llama_pro_blocks(args))))
    model.base_layers = args.num_layers
    return model


def lora_settings(args: argparse.Namespace) -> LoraSettings:
    return LoraSettings(rank=args.lora_rank, alpha=args.lora_alpha, dropout=args.lora_dropout, seed=args.seed)


def freeze_bottom(model: Any, layers: int) -> None:
    """Freeze the input embedding and the `layers` lowest transformer layers (global index).

    With tied embeddings the output layer is the same tensor: at PP=1 it is frozen with the
    embedding, and under pipeline parallelism the last stage's copy must be frozen too, or
    megatron-core's embedding-gradient all-reduce runs on one stage only and hangs."""
    if hasattr(model, "embedding"):
        for p in model.embedding.parameters():
            p.requires_grad_(False)
    if model.share_embeddings_and_output_weights and getattr(model, "output_layer", None) is not None:
        if model.output_layer.weight is not None:
            model.output_layer.weight.requires_grad_(False)
    for layer in model.decoder.layers:
        if layer.layer_number - 1 < layers:
            for p in layer.parameters():
                p.requires_grad_(False)


def train_only_layers(model: Any, layers: set[int]) -> None:
    """Freeze every parameter except those of the given (global, 0-based) layers."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.decoder.layers:
        if layer.layer_number - 1 in layers:
            for p in layer.parameters():
                p.requires_grad_(True)


def read_base_state(directory: str) -> dict[str, torch.Tensor]:
    """Global base tensors from a GPT dist checkpoint (optimizer entries dropped).

    Every rank reads the whole base (fine up to a few billion parameters on CPU memory; the
    offline tools/upscale_checkpoint.py path avoids it for larger models)."""
    plain = mc.dist_checkpointing.load_plain_tensors(directory)
    return {k: v for k, v in plain.items() if isinstance(v, torch.Tensor) and not k.startswith("optimizer")}


def load_initial_weights(model: Any, directory: str) -> str:
    """Fill `model` from --load when it is not a training run to resume. Returns its kind."""
    if is_scale_checkpoint(directory):
        load_checkpoint(model, directory)
        return "scale"
    base = read_base_state(directory)
    lora = getattr(model, "lora_settings", None)
    if lora is None and any(is_lora_key(k) for k in base):
        raise ValueError(f"--load {directory}: holds LoRA adapters; load it with --method lora "
                         "(merging them into the base weights is not supported)")
    try:
        if lora is not None:
            return _load_lora_initial(model, directory, base)
        if model.config.num_layers != getattr(model, "base_layers", model.config.num_layers):
            extra_layers = model.config.num_layers - model.base_layers
            load_global_state_dict(model, expand_depth(base, model.base_layers, extra_layers))
            return "base+depth"
        if hasattr(model, "scale_dims"):
            load_global_state_dict(model, upscale_state_dict(base, model.scale_dims))
            return "base+upscale"
        load_global_state_dict(model, base)
        return "base"
    except (KeyError, ValueError) as e:  # strict loading names the missing key or bad shape
        raise ValueError(f"--load {directory}: not a checkpoint of this base model: {e}") from e


def _load_lora_initial(model: Any, directory: str, state: dict[str, torch.Tensor]) -> str:
    """A base checkpoint (the adapters keep their fresh A and zero B), or a LoRA one whose every
    adapter loads too, if its rank and alpha are this run's."""
    if not any(is_lora_key(k) for k in state):
        missing = load_global_state_dict(model, state, strict=False)
        lacking = [k for k in missing if not is_lora_key(k)]
        if lacking:
            raise KeyError(f"state dict lacks {len(lacking)} key(s), first: {lacking[:5]}")
        return "base+lora"
    check_lora_record(model, directory)
    load_global_state_dict(model, state)
    return "lora"

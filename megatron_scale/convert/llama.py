"""Megatron-core models from `LlamaArgs` (and a recorded SCALE geometry), for this rank's TP
partition and pipeline stage.

The block is `model/spec.py:llama_block_spec` (megatron-core's local spec with a sequence-parallel
capable RMSNorm; same checkpoint keys), so a converted checkpoint loads into what training builds.
"""

from __future__ import annotations

from typing import Any

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleConfig
from megatron_scale.convert.model_args import LlamaArgs
from megatron_scale.model.builder import build_scale_gpt
from megatron_scale.model.lora import LoraSettings, init_lora_model, lora_layer_spec
from megatron_scale.model.spec import llama_block_spec


def build_llama_gpt(args: LlamaArgs, tp: int, pp: int, *, initialize: bool = False) -> Any:
    """GPTModel of this rank (parallel state must be initialised at tp, pp)."""
    cfg = args.transformer_config(tp, pp, initialize=initialize)
    return mc.GPTModel(
        cfg, llama_block_spec(cfg),
        pre_process=mc.parallel_state.is_pipeline_first_stage(),
        post_process=mc.parallel_state.is_pipeline_last_stage(),
        **args.gpt_kwargs(),
    )


def scale_config_from_record(dims: dict[str, Any]) -> ScaleConfig:
    """The ScaleConfig that resolves to a checkpoint's recorded `scale.dims`."""
    adapt_layers = tuple(sorted(dims.get("adapt_layers") or ()))
    return ScaleConfig(
        hidden_up=dims["hidden_up"], heads_up=dims["heads_up"], groups_up=dims["groups_up"],
        ffn_up=dims["ffn_up"], variant=dims["variant"], init=dims["init"], init_std=dims["init_std"],
        adapt_layers=adapt_layers, adapt_modules=tuple(sorted(dims.get("adapt_modules") or ("qkv", "proj"))),
        route_adapt=dims["variant"] == "route" and bool(adapt_layers),
        router_tau=dims["router_tau"], router_statistic=dims.get("router_statistic", "cosine"), seed=dims["seed"],
    )


def build_lora_gpt(args: LlamaArgs, lora: dict[str, Any], tp: int, pp: int) -> Any:
    """The GPTModel `--method lora` trains, for a recorded LoRA rank and alpha."""
    settings = LoraSettings(rank=int(lora["rank"]), alpha=float(lora["alpha"]))
    cfg = args.transformer_config(tp, pp)
    model = mc.GPTModel(
        cfg, lora_layer_spec(mc.get_gpt_layer_local_spec(normalization="RMSNorm"), settings, gated=True),
        pre_process=mc.parallel_state.is_pipeline_first_stage(),
        post_process=mc.parallel_state.is_pipeline_last_stage(),
        **args.gpt_kwargs(),
    )
    init_lora_model(model, settings)
    return model


def build_model(args: LlamaArgs, dims: dict[str, Any] | None, tp: int, pp: int, lora: dict[str, Any] | None = None) -> Any:
    """The plain Llama GPTModel (dims None), its LoRA version (lora: the recorded rank and
    alpha) or the SCALE model of a recorded geometry."""
    if lora is not None:
        return build_lora_gpt(args, lora, tp, pp)
    if dims is None:
        return build_llama_gpt(args, tp, pp)
    kw = args.gpt_kwargs()
    tied = kw.pop("share_embeddings_and_output_weights")
    return build_scale_gpt(
        args.transformer_config(tp, pp), scale_config_from_record(dims), tied_embeddings=tied,
        pre_process=mc.parallel_state.is_pipeline_first_stage(),
        post_process=mc.parallel_state.is_pipeline_last_stage(), **kw,
    )

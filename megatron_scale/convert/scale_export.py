"""SCALE checkpoint -> Hugging Face folder with its own modeling code (trust_remote_code).

The base tensors keep LlamaForCausalLM's names (keymap.py); each expansion block goes next to
its base tensor under the same module (hf_modeling/modeling_scale_llama.py):

    megatron-core (checkpoint key)                    HF (per layer i)
    linear_qkv.weight_21 / _22  [(h'+2g')k, ...]      self_attn.{q,k,v}_proj.weight_21 / _22  (split_qkv over g')
    linear_qkv.weight_12.layer<i> [(h+2g)k, d']       self_attn.{q,k,v}_proj.weight_12        (split_qkv over g)
    linear_proj.weight_{21,22,12...}                  self_attn.o_proj.weight_{21,22,12}
    linear_fc1.weight_21 / _22  [2f', ...]            mlp.{gate,up}_proj.weight_21 / _22      ([gate; up])
    linear_fc1.weight_12.layer<i> [2f, d']            mlp.{gate,up}_proj.weight_12
    linear_fc2.weight_{21,22,12...}                   mlp.down_proj.weight_{21,22,12}
    ...linear_qkv.layer_norm_weight_up                input_layernorm.weight_up
    ...linear_fc1.layer_norm_weight_up                post_attention_layernorm.weight_up
    decoder.final_layernorm.weight_up                 model.norm.weight_up
    embedding.word_embeddings.weight_up               model.embed_tokens.weight_up
    output_layer.weight_up                            lm_head.weight_up
The configuration and modeling files are copied from the package into the folder, and
config.json's auto_map points transformers' Auto classes at them. config.json's model_type is
"llama" so the tokenizer loads without remote code; its hidden_act guards against loading the
folder as a plain Llama (hf_modeling/configuration_scale_llama.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from megatron_scale.scale_config import ScaleDims
from megatron_scale.convert import keymap
from megatron_scale.convert.hf_io import ShardSummary, write_json, write_shards
from megatron_scale.convert.hf_modeling.configuration_scale_llama import GUARD
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.convert.hf_config import ConversionError, to_hf_config, with_dtype
from megatron_scale.model.args import DTYPES, LlamaArgs
from megatron_scale.model.weights.keys import HF_LAYER, LINEARS, UPS, W12, W21, W22, w12_layer

MODELING = Path(__file__).parent / "hf_modeling"
FILES = ("configuration_scale_llama.py", "routing_scale_llama.py", "modeling_scale_llama.py")


def w12_layers(reader: MegatronReader) -> dict[str, list[int]]:
    """Layers where each module has a W12, from the checkpoint keys."""
    found: dict[str, list[int]] = {m: [] for m in LINEARS}
    for key in reader.names():
        for module, lin in LINEARS.items():
            layer = w12_layer(key, lin)
            if layer is not None:
                found[module].append(layer)
    return {m: sorted(v) for m, v in found.items()}


def expansion_tensors(reader: MegatronReader, args: LlamaArgs, dims: ScaleDims) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) for every expansion block."""
    for up in UPS:
        stacked = reader.get(up.megatron)
        if not up.stacked:
            yield up.hf[0], stacked
            continue
        for i in range(args.num_layers):
            yield HF_LAYER.format(i) + up.hf[0], stacked[i]
    w12 = w12_layers(reader)
    for module, lin in LINEARS.items():
        for block in (W21, W22):
            stacked = reader.get(lin.prefix + block)
            for i in range(args.num_layers):
                parts = keymap.split(lin.how, stacked[i], dims.groups_up, dims.head_dim)
                for name, part in zip(lin.hf, parts, strict=True):
                    yield f"{HF_LAYER.format(i)}{name}.{block}", part
        for i in w12[module]:
            parts = keymap.split(lin.how, reader.get(f"{lin.prefix}{W12}.layer{i}"), dims.groups, dims.head_dim)
            for name, part in zip(lin.hf, parts, strict=True):
                yield f"{HF_LAYER.format(i)}{name}.{W12}", part


def scale_hf_config(args: LlamaArgs, dims: ScaleDims, w12: dict[str, list[int]], dtype: str,
                    unit_codes: str | None = None) -> dict[str, Any]:
    cfg = to_hf_config(with_dtype(args, dtype))
    cfg.update(
        architectures=["ScaleLlamaForCausalLM"], model_type="llama", hidden_act=GUARD,
        auto_map={"AutoConfig": "configuration_scale_llama.ScaleLlamaConfig",
                  "AutoModel": "modeling_scale_llama.ScaleLlamaModel",
                  "AutoModelForCausalLM": "modeling_scale_llama.ScaleLlamaForCausalLM"},
        tie_word_embeddings=False, scale_tied_output=args.tied,
        scale_hidden_up=dims.hidden_up, scale_heads_up=dims.heads_up, scale_groups_up=dims.groups_up,
        scale_ffn_up=dims.ffn_up, scale_variant=dims.variant, **dims.router.record("scale_router_"),
        scale_output_rows=dims.training.output_rows, **dims.gate.record("scale_gate_"),
        scale_w12=sorted([i, m] for m, layers in w12.items() for i in layers), scale_output_head="auto",
    )
    if unit_codes is not None:
        cfg["scale_router_unit_codes"] = unit_codes
    return cfg


def export_scale(reader: MegatronReader, args: LlamaArgs, dims: ScaleDims, tmp: Path, dtype: str,
                 max_shard_bytes: int, progress: bool, unit_codes: str | None = None) -> ShardSummary:
    if dims.head_dim != args.kv_channels or dims.hidden != args.hidden_size:
        raise ConversionError(f"{reader.dir}: scale.dims do not match the recorded model_args")
    reader.check_shapes(keymap.megatron_shapes(args))
    out_dtype = DTYPES[dtype]

    def items() -> Iterator[tuple[str, torch.Tensor]]:
        yield from keymap.megatron_to_hf(reader.get, args)
        yield from expansion_tensors(reader, args, dims)

    with tqdm(desc="writing HF tensors", unit="tensor", disable=not progress) as bar:
        def cast() -> Iterator[tuple[str, torch.Tensor]]:
            for name, t in items():
                bar.update(1)
                yield name, t.to(out_dtype)

        summary = write_shards(cast(), tmp, max_shard_bytes)
    write_json(tmp / "config.json", scale_hf_config(args, dims, w12_layers(reader), dtype, unit_codes))
    for name in FILES:
        shutil.copy2(MODELING / name, tmp / name)
    return summary

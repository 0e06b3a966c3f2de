"""SCALE Preserve / Adapt checkpoint -> its fused view: a Hugging Face Llama of the whole width
that serving engines' Transformers backends load (hf_modeling/modeling_scale_llama_fused.py).

Each module of the SCALE export (scale_export.py: base tensors under Llama's names, the
expansion beside them) becomes one Llama tensor:

    <linear>.weight  = [[W  W12] ; [W21  W22]]   W12 zero where the checkpoint has none
    <norm>.weight    = [g ; g_up]                 (the split point d is config.scale_norm_split)
    embed_tokens     = [E | E_up]
    lm_head          = [W_out | W_out_up]         W_out = E when the base ties them

so the folder computes z_a = W_out x + W_out_up x_up, the SCALE model's adaptation head. A Route
model (its router), a gated model (its gate) and per-unit routing need SCALE's own head: they are
refused before anything is written, naming the head this view would serve instead.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.convert import keymap
from megatron_scale.convert.hf_config import ConversionError
from megatron_scale.convert.hf_io import ShardSummary, write_json, write_shards
from megatron_scale.convert.scale_export import MODELING, expansion_tensors, scale_hf_config, w12_layers
from megatron_scale.model.args import DTYPES, LlamaArgs
from megatron_scale.scale_config import ScaleDims

FILES = ("configuration_scale_llama.py", "routing_scale_llama.py", "modeling_scale_llama_fused.py")
BLOCKS = ("weight_12", "weight_21", "weight_22", "weight_up")
SERVES = "the fused view serves the adaptation head z_a = W_out x + W_out_up x_up"


def check_fusable(dims: ScaleDims, where: Any) -> None:
    """One error, before any work, where the fused view cannot be this model."""
    if dims.routed:
        raise ConversionError(f"--fused-view: {where} is SCALE-Route, whose router (and per-unit routing) needs "
                              f"SCALE's own head; {SERVES} only: export the SCALE model to route (transformers "
                              "generate()), or --preserve-head-only for z_p")
    if dims.gated:
        raise ConversionError(f"--fused-view: {where} gates W_out_up's term (scale gate {dims.gate.statistic}); "
                              f"{SERVES} ungated, which is not this model's head: export the SCALE model")


def fuse(base: Iterable[tuple[str, torch.Tensor]], expansion: dict[str, torch.Tensor],
         tied: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of the fused view, from the SCALE export's tensors: the base ones streamed
    (`base`, Llama's names), the expansion blocks by name (`expansion`, consumed). Every block
    must find its base tensor."""
    for name, weight in base:
        prefix = name.removesuffix(".weight")
        up = expansion.pop(prefix + ".weight_up", None)
        if up is not None:  # a norm or the embedding: [base | new] along the feature dim
            yield name, torch.cat((weight, up.to(weight.dtype)), dim=-1)
            if tied and name == "model.embed_tokens.weight":
                yield "lm_head.weight", torch.cat((weight, expansion.pop("lm_head.weight_up").to(weight.dtype)), -1)
            continue
        w21, w22 = expansion.pop(prefix + ".weight_21"), expansion.pop(prefix + ".weight_22")
        w12 = expansion.pop(prefix + ".weight_12", None)
        if w12 is None:
            w12 = weight.new_zeros(weight.shape[0], w22.shape[1])
        yield name, torch.cat((torch.cat((weight, w12.to(weight.dtype)), 1),
                               torch.cat((w21, w22), 1).to(weight.dtype)), 0)
    if expansion:
        raise ConversionError(f"--fused-view: expansion tensors without a base tensor: {sorted(expansion)[:4]}")


def split_state(state: dict[str, torch.Tensor]) -> tuple[list[tuple[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """A SCALE export's state dict as fuse() takes it: (base items in order, expansion by name)."""
    blocks = {k: v for k, v in state.items() if k.rsplit(".", 1)[-1] in BLOCKS}
    return [(k, v) for k, v in state.items() if k not in blocks], blocks


def fused_hf_config(scale: dict[str, Any]) -> dict[str, Any]:
    """config.json of the fused view, from the SCALE export's."""
    cfg = {k: v for k, v in scale.items() if not k.startswith("scale_") and k != "auto_map"}
    cfg.update(
        hidden_size=scale["hidden_size"] + scale["scale_hidden_up"],
        num_attention_heads=scale["num_attention_heads"] + scale["scale_heads_up"],
        num_key_value_heads=scale["num_key_value_heads"] + scale["scale_groups_up"],
        intermediate_size=scale["intermediate_size"] + scale["scale_ffn_up"],
        head_dim=scale["head_dim"], tie_word_embeddings=False, architectures=["ScaleFusedLlamaForCausalLM"],
        auto_map={"AutoConfig": "configuration_scale_llama.ScaleFusedLlamaConfig",
                  "AutoModel": "modeling_scale_llama_fused.ScaleFusedLlamaModel",
                  "AutoModelForCausalLM": "modeling_scale_llama_fused.ScaleFusedLlamaForCausalLM"},
        scale_norm_split=scale["hidden_size"], scale_variant=scale["scale_variant"],
        scale_output_rows=scale["scale_output_rows"],
    )
    return cfg


def export_fused(reader: MegatronReader, args: LlamaArgs, dims: ScaleDims, tmp: Path, dtype: str,
                 max_shard_bytes: int, progress: bool) -> ShardSummary:
    """Write the fused view of a SCALE checkpoint into `tmp`. The expansion blocks are held in
    memory (about a third to a half of the base's size at the default quarter widths) while the
    base tensors stream past them."""
    check_fusable(dims, reader.dir)
    if dims.head_dim != args.kv_channels or dims.hidden != args.hidden_size:
        raise ConversionError(f"{reader.dir}: scale.dims do not match the recorded model_args")
    reader.check_shapes(keymap.megatron_shapes(args))
    out_dtype = DTYPES[dtype]
    expansion = {name: t.to(out_dtype) for name, t in expansion_tensors(reader, args, dims)}
    with tqdm(desc="writing fused HF tensors", unit="tensor", disable=not progress) as bar:
        def cast() -> Iterator[tuple[str, torch.Tensor]]:
            for name, t in fuse(keymap.megatron_to_hf(reader.get, args), expansion, args.tied):
                bar.update(1)
                yield name, t.to(out_dtype)

        summary = write_shards(cast(), tmp, max_shard_bytes)
    write_json(tmp / "config.json", fused_hf_config(scale_hf_config(args, dims, w12_layers(reader), dtype)))
    for name in FILES:
        shutil.copy2(MODELING / name, tmp / name)
    return summary

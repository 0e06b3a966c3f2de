"""The HF <-> megatron-core key table at Llama-3.1-8B size (32 layers, hidden 4096, 32 heads,
8 KV groups, FFN 14336, vocab 128256, untied), on the meta device: no weight is allocated.

Checked both ways: every HF tensor of transformers' own LlamaForCausalLM (built on meta from the
config.json we would write) maps to exactly the megatron-core keys and global shapes that
megatron-core's GPTModel declares in its sharded state dict (built on meta in a 1-rank group),
and back, every megatron key to every HF name with its shape. Tied (Llama-3.2-1B) as well."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from megatron_scale.convert import keymap
from megatron_scale.convert.hf_config import to_hf_config
from megatron_scale.model.args import LlamaArgs
from tests._dist import run_ranks

LLAMA_31_8B = LlamaArgs(
    num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
    kv_channels=128, vocab_size=128256, max_position_embeddings=131072, rotary_base=500000.0,
    rope_scaling=True, rope_scaling_factor=8.0, params_dtype="bfloat16",
)
LLAMA_32_1B = dataclasses.replace(
    LLAMA_31_8B, num_layers=16, hidden_size=2048, num_attention_heads=32, num_query_groups=8,
    ffn_hidden_size=8192, kv_channels=64, rope_scaling_factor=32.0, untie_embeddings_and_output_weights=False,
)


def _meta(shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    return {k: torch.empty(s, device="meta") for k, s in shapes.items()}


def _hf_model_shapes(args: LlamaArgs) -> dict[str, tuple[int, ...]]:
    from transformers import AutoConfig, LlamaForCausalLM

    cfg = AutoConfig.for_model(**to_hf_config(args))
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    sd = model.state_dict()
    if args.tied:
        sd.pop("lm_head.weight")  # the embedding itself; not saved
    return {k: tuple(v.shape) for k, v in sd.items()}


def _megatron_model_shapes(rank: int, world: int, args: LlamaArgs) -> dict[str, tuple[int, ...]]:
    from megatron_scale.model.build import build_model
    from megatron_scale.methods import Full
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.weights.state import sharded_tensors

    init_distributed(1, 1, device="cpu")
    with torch.device("meta"):
        model = build_model(args, Full())
    assert all(p.numel() < 10**6 or p.device.type == "meta" for p in model.parameters())
    return {st.key: tuple(st.global_shape) for _, st in sharded_tensors(model)}


def _both_models(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.distributed import destroy_distributed

    out = {"8b": _megatron_model_shapes(rank, world, LLAMA_31_8B)}
    destroy_distributed()
    out["1b"] = _megatron_model_shapes(rank, world, LLAMA_32_1B)
    return out


@pytest.fixture(scope="module")
def megatron_shapes() -> dict[str, Any]:
    return run_ranks(_both_models, 1)[0]


@pytest.mark.parametrize("name,args", [("8b", LLAMA_31_8B), ("1b", LLAMA_32_1B)])
def test_tables_match_the_real_models(megatron_shapes: dict, name: str, args: LlamaArgs) -> None:
    assert keymap.megatron_shapes(args) == megatron_shapes[name]
    assert keymap.hf_shapes(args) == _hf_model_shapes(args)


@pytest.mark.parametrize("args", [LLAMA_31_8B, LLAMA_32_1B], ids=["8b", "1b"])
def test_every_key_both_ways(args: LlamaArgs) -> None:
    hf = _meta(keymap.hf_shapes(args))
    used: list[str] = []

    def get_hf(name: str) -> torch.Tensor:
        used.append(name)
        return hf[name]

    mega = dict(keymap.hf_to_megatron(get_hf, args))
    assert {k: tuple(v.shape) for k, v in mega.items()} == keymap.megatron_shapes(args)
    assert sorted(used) == sorted(hf)  # every HF tensor read exactly once
    back = dict(keymap.megatron_to_hf(mega.__getitem__, args))
    assert {k: tuple(v.shape) for k, v in back.items()} == keymap.hf_shapes(args)
    assert ("output_layer.weight" in mega) == ("lm_head.weight" in back) == (not args.tied)


def test_qkv_and_gate_up_layouts_invert() -> None:
    args = dataclasses.replace(LLAMA_31_8B, num_layers=1, hidden_size=16, num_attention_heads=4,
                               num_query_groups=2, kv_channels=4, ffn_hidden_size=8, vocab_size=8)
    hf = {k: torch.randn(s) for k, s in keymap.hf_shapes(args).items()}
    mega = dict(keymap.hf_to_megatron(hf.__getitem__, args))
    qkv = mega["decoder.layers.self_attention.linear_qkv.weight"][0]
    # per group: 2 query heads, then its key head, then its value head (4 rows each)
    q, k = hf["model.layers.0.self_attn.q_proj.weight"], hf["model.layers.0.self_attn.k_proj.weight"]
    assert torch.equal(qkv[:8], q[:8]) and torch.equal(qkv[8:12], k[:4]) and torch.equal(qkv[16:24], q[8:16])
    back = dict(keymap.megatron_to_hf(mega.__getitem__, args))
    assert all(torch.equal(back[k], hf[k]) for k in hf)

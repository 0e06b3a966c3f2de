"""Tiny SCALE exports beside the stock LlamaForCausalLM they upscale, built in-process (no
Megatron, no download): the reference every test of transformers' conventions runs the same call on.

The base is a random Llama (d 32, 2 layers, 4 query heads over 2 KV groups of width 8, SwiGLU 64,
vocabulary 64, pad id 0). Each SCALE model holds the base's tensors under their Llama names and an
expansion of d' 8, h' 2, g' 1, f' 16 drawn at random ("trained": E_up, W_out_up, W21, W22, the new
gains and, for Adapt, W12 in layer 0's proj and layer 1's qkv and fc2 are all non-zero), so the
heads differ: z_a is not z_p, Adapt's W12 moves the base path, and the Route model (tied
embeddings, a cosine router at the median) emits both heads. Preserve and Route have no W12, so
their first d dims of every hidden state and their z_p are the base Llama's.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import torch

from tests import _unit_vocab

VOCAB, D, LAYERS, HEADS, GROUPS, K, F = 64, 32, 2, 4, 2, 8, 64
UP = {"scale_hidden_up": 8, "scale_heads_up": 2, "scale_groups_up": 1, "scale_ffn_up": 16}
VARIANTS = ("preserve", "adapt", "route")
W12 = {"preserve": [], "adapt": [[0, "proj"], [1, "qkv"], [1, "fc2"]], "route": []}
TIED = {"preserve": False, "adapt": False, "route": True}


def llama_kwargs(tied: bool) -> dict[str, Any]:
    return {"vocab_size": VOCAB, "hidden_size": D, "intermediate_size": F, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": GROUPS, "head_dim": K,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": tied,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "pad_token_id": 0, "bos_token_id": None, "eos_token_id": None}


def unit_codes() -> str:
    """The byte-level test vocabulary's codes (tests/_unit_vocab.py), as config.json carries them."""
    from megatron_scale.model.layers.route_units import piece_codes

    return base64.b64encode(piece_codes(_unit_vocab.pieces(VOCAB)).numpy().tobytes()).decode("ascii")


def llama(tied: bool, seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**llama_kwargs(tied))).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0, 0.8 if "embed_tokens" in name else 0.2)
    return model


def scale(variant: str, base: Any, seed: int = 1, hidden_up: int = UP["scale_hidden_up"]) -> Any:
    """The SCALE export of `base` (its tensors; tied as `base` is) with a random expansion of d'
    `hidden_up`; Route also carries the unit codes (it routes per token unless told otherwise)."""
    from megatron_scale.convert.hf_modeling.configuration_scale_llama import ScaleLlamaConfig
    from megatron_scale.convert.hf_modeling.modeling_scale_llama import ScaleLlamaForCausalLM

    tied = base.config.tie_word_embeddings
    extra = {"scale_router_tau": 0.85, "scale_router_unit_codes": unit_codes()} if variant == "route" else {}
    config = ScaleLlamaConfig(**llama_kwargs(tied), **{**UP, "scale_hidden_up": hidden_up}, scale_variant=variant, scale_w12=W12[variant],
                              scale_tied_output=tied, **extra,
                              architectures=["ScaleLlamaForCausalLM"], auto_map=auto_map())
    torch.manual_seed(seed)
    model = ScaleLlamaForCausalLM(config).eval()
    own = base.state_dict()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in own:
                p.copy_(own[name])
            elif "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1.0 if name == "lm_head.weight_up" else 0.5 if "embed" in name else 0.15)
    return model


def auto_map() -> dict[str, str]:
    return {"AutoConfig": "configuration_scale_llama.ScaleLlamaConfig",
            "AutoModel": "modeling_scale_llama.ScaleLlamaModel",
            "AutoModelForCausalLM": "modeling_scale_llama.ScaleLlamaForCausalLM"}


def save(model: Any, folder: Path, files: tuple[str, ...] | None = None) -> Path:
    """`model` written as the export writes it: safetensors, config.json and the modeling files."""
    from megatron_scale.convert.scale_export import FILES, MODELING

    model.save_pretrained(folder)
    for name in files or FILES:
        shutil.copy2(MODELING / name, folder / name)
    return folder


def fused(model: Any) -> Any:
    """The fused view of a SCALE export (convert/fused_view.py on its state dict and config)."""
    from megatron_scale.convert import fused_view
    from megatron_scale.convert.hf_modeling.configuration_scale_llama import ScaleFusedLlamaConfig
    from megatron_scale.convert.hf_modeling.modeling_scale_llama_fused import ScaleFusedLlamaForCausalLM

    base, blocks = fused_view.split_state(model.state_dict())
    tensors = dict(fused_view.fuse(base, blocks, model.config.scale_tied_output))
    view = ScaleFusedLlamaForCausalLM(ScaleFusedLlamaConfig(**fused_view.fused_hf_config(model.config.to_dict())))
    view.load_state_dict(tensors, strict=True)
    return view.eval()


def ids(batch: int = 2, length: int = 12, seed: int = 3) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))

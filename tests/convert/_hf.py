"""Tiny random Hugging Face Llama folders for conversion tests (built in-process, never
downloaded): GQA (8 query heads over 4 KV groups, head size 8), Llama 3.x RoPE scaling with a
context long enough that the scaling changes frequencies, tied or untied embeddings, saved as
several safetensors shards with an index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB, HIDDEN, LAYERS, HEADS, GROUPS, FFN = 96, 64, 4, 8, 4, 128
ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}


def hf_config(tied: bool, **overrides: Any) -> Any:
    from transformers import LlamaConfig

    kw: dict[str, Any] = {
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": GROUPS, "max_position_embeddings": 131072,
        "rope_parameters": {"rope_theta": 500000.0, **ROPE}, "tie_word_embeddings": tied, "rms_norm_eps": 1e-5,
    }
    kw.update(overrides)
    return LlamaConfig(**kw)


def make_hf(folder: Path, tied: bool, seed: int = 0, **overrides: Any) -> Any:
    """Write a random LlamaForCausalLM (weights large enough for O(1) logits) to `folder`."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(hf_config(tied, **overrides)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.normal_(0, 0.5)
            else:
                p.normal_(0, 0.12)
    model.save_pretrained(folder, max_shard_size="100KB")
    return model


def tokens(batch: int = 2, seq: int = 48, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def read_folder(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out

"""`--verify`: the exported Hugging Face model and the megatron-core model give the same logits.

Both run in fp32 on the same sample tokens. The megatron side is rebuilt at TP=1, PP=1 from the
checkpoint's global tensors (so any saved layout verifies), on a rank of its own; the HF side is
loaded by transformers from the written folder, exactly as a user would load it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from megatron_scale.convert.launch import on_ranks
from megatron_scale.convert.llama import build_model
from megatron_scale.convert.megatron_io import MegatronReader
from megatron_scale.convert.model_args import LlamaArgs
from megatron_scale.model.builder import output_head
from megatron_scale.model.inputs import causal_mask, position_ids
from megatron_scale.model.state import load_global_state_dict


def sample_tokens(vocab: int, batch: int = 2, seq: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def megatron_forward(model: Any, ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Full logits [b, s, V] of a TP=1, PP=1 megatron-core model on `device` (causal attention);
    returned on the host."""
    b, s = ids.shape
    with torch.no_grad():
        return model(ids.to(device), position_ids(b, s, device), causal_mask(s, device)).cpu()


def load_fp32(model: Any, reader: MegatronReader) -> None:
    """Fill a (TP=1) model with a checkpoint's global tensors, cast to the model's dtype."""
    keys = [k for k in reader.names() if not k.startswith(("optimizer", "rng", "rerun"))]
    load_global_state_dict(model, {k: reader.get(k).float() for k in keys}, strict=True)


def _megatron_logits_rank(ckpt_dir: str, args: LlamaArgs, dims: dict | None, lora: dict | None, ids: torch.Tensor,
                          head: str, *, device: torch.device) -> torch.Tensor:
    reader = MegatronReader(ckpt_dir)
    model = build_model(dataclasses.replace(args, params_dtype="float32"), dims, 1, 1, lora=lora).to(device).eval()
    load_fp32(model, reader)
    if dims is None:
        return megatron_forward(model, ids, device)
    with output_head(model, head):
        return megatron_forward(model, ids, device)


def megatron_logits(ckpt_dir: str, args: LlamaArgs, dims: dict | None, ids: torch.Tensor, head: str = "auto",
                    lora: dict | None = None) -> torch.Tensor:
    return on_ranks(_megatron_logits_rank, 1, 1, str(ckpt_dir), args, dims, lora, ids, head)[0]


def hf_logits(folder: str, ids: torch.Tensor, trust_remote_code: bool = False,
              device: torch.device | None = None) -> torch.Tensor:
    """The exported folder's logits as transformers computes them, on `device` (default: the GPU
    where there is one, as the megatron rank's device="auto"); returned on the host."""
    from transformers import AutoModelForCausalLM

    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, trust_remote_code=trust_remote_code)
    model.to(device)
    with torch.no_grad():
        return model(ids.to(device)).logits.cpu()


def compare(ckpt_dir: str, folder: str, args: LlamaArgs, dims: dict | None, *, lora: dict | None = None,
            head: str = "auto", trust_remote_code: bool = False) -> float:
    """Max |logit difference| between the checkpoint and the exported folder. A LoRA checkpoint
    runs as the LoRA model it is (adapters unmerged), so the merge is checked too."""
    ids = sample_tokens(args.vocab_size)
    ref = megatron_logits(ckpt_dir, args, dims, ids, head, lora)
    got = hf_logits(folder, ids, trust_remote_code)
    return float((ref - got).abs().max())

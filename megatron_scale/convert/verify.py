"""`--verify`: the exported Hugging Face model and the megatron-core model give the same logits.

Both run in fp32 on the same sample tokens. The megatron side is rebuilt at TP=1, PP=1 from the
checkpoint's global tensors (so any saved layout verifies), on a rank of its own; the HF side is
loaded by transformers from the written folder, exactly as a user would load it.

The reference's weights are first rounded to the export dtype, so both models hold the same
numbers and only float32 arithmetic in another order separates them: the tolerance is
RTOL x max(1, max |logit|) (RTOL = 512 float32 eps = 6.1e-5), whatever the model's size or
the export dtype. The one place the two cannot hold the same numbers is a LoRA export below
float32 (the merge W + BA is rounded, the reference rounds W, A and B apart): there the export
dtype's eps is added to RTOL.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.launch import on_ranks
from megatron_scale.methods import TrainingMethod
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import build_model
from megatron_scale.model.layers.heads import output_head, set_unit_codes
from megatron_scale.model.inputs import causal_mask, position_ids
from megatron_scale.model.weights.state import load_global_state_dict


def sample_tokens(vocab: int, batch: int = 2, seq: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def megatron_forward(model: Any, ids: torch.Tensor, device: torch.device, labels: torch.Tensor | None = None) -> torch.Tensor:
    """Full logits [b, s, V] of a TP=1, PP=1 megatron-core model on `device` (causal attention);
    returned on the host. `labels` (the tokens predicted) reach a router deciding per unit."""
    b, s = ids.shape
    with torch.no_grad():
        extra = {} if labels is None else {"route_labels": labels.to(device)}
        return model(ids.to(device), position_ids(b, s, device), causal_mask(s, device), **extra).cpu()


RTOL = 512 * torch.finfo(torch.float32).eps


def tolerance(max_abs_logit: float, dtype: torch.dtype = torch.float32, merged: bool = False) -> float:
    """The largest |logit difference| a correct export may show (see the module docstring)."""
    rtol = RTOL + (torch.finfo(dtype).eps if merged and dtype != torch.float32 else 0.0)
    return rtol * max(1.0, max_abs_logit)


def load_fp32(model: Any, reader: MegatronReader, dtype: torch.dtype = torch.float32) -> None:
    """Fill a (TP=1) fp32 model with a checkpoint's global tensors, rounded to `dtype` first."""
    keys = [k for k in reader.names() if not k.startswith(("optimizer", "rng", "rerun"))]
    load_global_state_dict(model, {k: reader.get(k).to(dtype).float() for k in keys}, strict=True)


def _megatron_logits_rank(ckpt_dir: str, args: LlamaArgs, method: TrainingMethod, ids: torch.Tensor,
                          head: str, dtype: torch.dtype, unit_codes: torch.Tensor | None = None, *,
                          device: torch.device) -> torch.Tensor:
    reader = MegatronReader(ckpt_dir)
    # the method given (an export's router override replaces the recorded router)
    model = build_model(dataclasses.replace(args, params_dtype="float32"), method).to(device).eval()
    load_fp32(model, reader, dtype)
    if method.scale_dims is None:
        return megatron_forward(model, ids, device)
    set_unit_codes(model, unit_codes)
    labels = torch.cat((ids[:, 1:], ids[:, -1:]), dim=1) if unit_codes is not None else None  # the last: unknown
    with output_head(model, head):
        return megatron_forward(model, ids, device, labels)


def megatron_logits(ckpt_dir: str, args: LlamaArgs, method: TrainingMethod, ids: torch.Tensor, head: str = "auto",
                    dtype: torch.dtype = torch.float32, unit_codes: torch.Tensor | None = None) -> torch.Tensor:
    """The checkpoint's logits on `ids`, as the model `method` builds; a router deciding per
    character or word (`unit_codes` given) is told the labels ids[:, 1:], and its last position
    (whose label the HF model cannot know, modeling_scale_llama.UnitRouter) is not comparable."""
    return on_ranks(_megatron_logits_rank, 1, 1, str(ckpt_dir), args, method, ids, head, dtype, unit_codes)[0]


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


def compare(ckpt_dir: str, folder: str, args: LlamaArgs, method: TrainingMethod, *, head: str = "auto",
            trust_remote_code: bool = False, dtype: torch.dtype = torch.float32,
            unit_codes: torch.Tensor | None = None) -> tuple[float, float]:
    """(max |logit difference|, its tolerance) between the checkpoint, its weights rounded to the
    export `dtype`, and the exported folder. The checkpoint runs as the model `method` builds: a
    LoRA checkpoint as the LoRA model it is (adapters unmerged), so the merge is checked too. A
    Route export deciding per character or word is compared at every position but the last
    (megatron_logits)."""
    ids = sample_tokens(args.vocab_size)
    dims = method.scale_dims
    per_unit = dims is not None and dims.routed and dims.router.unit != "token" and head in ("auto", "route")
    codes = unit_codes if per_unit else None
    ref = megatron_logits(ckpt_dir, args, method, ids, head, dtype, codes)
    got = hf_logits(folder, ids, trust_remote_code)
    if codes is not None:
        ref, got = ref[:, :-1], got[:, :-1]
    return float((ref - got).abs().max()), tolerance(float(ref.abs().max()), dtype, merged=method.merged_on_export)

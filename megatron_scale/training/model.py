"""Where a run's first weights come from, per method (the model itself: model/build.py).

A base checkpoint (any megatron-core GPT dist checkpoint, including a `full` run's) is read as
global tensors and, for SCALE, upscaled on load, for LLaMA-Pro grown in depth; a SCALE checkpoint
loads as it is. A LoRA model takes a base checkpoint (its adapters start fresh) or a LoRA one
(adapters included).
"""

from __future__ import annotations

from typing import Any

import torch

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleConfig
from megatron_scale.checkpoint import check_lora_record, is_scale_checkpoint, load_checkpoint
from megatron_scale.model.lora import LoraSettings, is_lora_key
from megatron_scale.model.methods import LlamaPro, Method
from megatron_scale.model.state import load_global_state_dict
from megatron_scale.upscale import load_upscaled
from megatron_scale.upscale.depth import expand_depth


def read_base_state(directory: str) -> dict[str, torch.Tensor]:
    """Global base tensors from a GPT dist checkpoint (optimizer entries dropped).

    Every rank reads the whole base (fine up to a few billion parameters on CPU memory; the
    offline tools/upscale_checkpoint.py path avoids it for larger models)."""
    plain = mc.dist_checkpointing.load_plain_tensors(directory)
    return {k: v for k, v in plain.items() if isinstance(v, torch.Tensor) and not k.startswith("optimizer")}


def load_initial_weights(model: Any, directory: str, method: Method, base_layers: int) -> str:
    """Fill `model` (built for `method` from a base of `base_layers` layers) from --load when it
    is not a training run to resume. Returns what was loaded."""
    if is_scale_checkpoint(directory):
        load_checkpoint(model, directory)
        return "scale"
    base = read_base_state(directory)
    lora = isinstance(method, LoraSettings)
    if not lora and any(is_lora_key(k) for k in base):
        raise ValueError(f"--load {directory}: holds LoRA adapters; load it with --method lora "
                         "(merging them into the base weights is not supported)")
    try:
        if lora:
            return _load_lora_initial(model, directory, base)
        if isinstance(method, LlamaPro):
            load_global_state_dict(model, expand_depth(base, base_layers, method.blocks))
            return "base+depth"
        if isinstance(method, ScaleConfig):
            load_upscaled(model, base)
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

"""The Transformer Engine backend of the SCALE linears: the guarded entry point.

What it is to hold (performance issue): SCALE versions of TEColumnParallelLinear,
TERowParallelLinear and TELayerNormColumnParallelLinear (the split norm fused where TE allows),
FP8 through Megatron's flags (--fp8-format hybrid, delayed and tensorwise recipes), the FP8 casts of
the frozen base weights cached across steps, and no main_grad for frozen weights under
gradient-accumulation fusion.

Status: not implemented. It was written where no GPU and no Transformer Engine could be had, and a
TE layer that has never run (FP8 scaling state, weight-cast caching, userbuffer names) would be a
guess; `require_te` therefore refuses every flag that needs it, by name, instead of silently
running the local path. The local backend (linear.py, fused.py) is what --transformer-impl local
and every CPU run use. Nothing here imports Transformer Engine at module import time.
"""

from __future__ import annotations

import importlib.util

TE_FLAGS = ("--transformer-impl transformer_engine", "--fp8-format", "--fp8-recipe")


def te_available() -> bool:
    """Whether transformer_engine.pytorch can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec("transformer_engine.pytorch") is not None
    except ModuleNotFoundError:
        return False


def require_te(flag: str) -> None:
    """Refuse `flag` (one of TE_FLAGS): SCALE has no Transformer Engine layers yet, and without
    Transformer Engine installed there is nothing to build them on either."""
    if not te_available():
        raise RuntimeError(
            f"{flag} needs NVIDIA Transformer Engine (pip install 'megatron-core[te]' on a CUDA "
            "machine), which is not installed; use --transformer-impl local (bf16 works without it)"
        )
    raise NotImplementedError(
        f"{flag}: SCALE's Transformer Engine linears are not implemented yet; use "
        "--transformer-impl local (the fused local path, bf16 without FP8)"
    )

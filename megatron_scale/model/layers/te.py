"""The Transformer Engine entry point: the one place that imports transformer_engine.

Nothing here imports it at module import time: Transformer Engine needs an NVIDIA driver even to
import, and the package must work (and name the flag that needs TE) without it. `te_pytorch` is
what every TE-backed module calls to get `transformer_engine.pytorch`; tests on machines without
a GPU may hand it a stand-in with the same interface (tests/model/layers/test_te_backend.py).

FP8 follows megatron-core: --fp8-format (hybrid | e4m3) and --fp8-recipe (delayed | tensorwise) set
TransformerConfig.fp8 / fp8_recipe, and megatron-core's TransformerBlock enters TE's FP8 autocast
around each layer.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType, SimpleNamespace
from typing import Any

from megatron_scale._te_probe import te_status

TE_FLAGS = ("--transformer-impl transformer_engine", "--fp8-format", "--fp8-recipe")
FP8_FORMATS = ("hybrid", "e4m3")
FP8_RECIPES = ("delayed", "tensorwise")

_override: Any = None


def te_available() -> bool:
    """Whether transformer_engine.pytorch imports here (_te_probe.py; imports it when installed)."""
    return _override is not None or te_status()[0]


def te_reason() -> str:
    """One line: why Transformer Engine cannot be used here (or that it can)."""
    return "a stand-in (tests)" if _override is not None else te_status()[1]


def apex_wgrad_kernel() -> bool:
    """Whether apex's fused_weight_gradient_mlp_cuda is importable: megatron-core's own linears
    (ColumnParallelLinear, which GPTModel always builds its output layer from) refuse
    gradient_accumulation_fusion without it, in __init__. NVIDIA's PyTorch images have apex; a
    plain PyTorch GPU machine does not."""
    return importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is not None


def require_te(flag: str) -> None:
    """Stop with one error naming `flag` when Transformer Engine is not usable, saying why."""
    if not te_available():
        raise RuntimeError(
            f"{flag} needs NVIDIA Transformer Engine, not usable here ({te_reason()}); it is in the "
            "project's Docker image, or the offline kit installs it (docs/gpu.md); use "
            "--transformer-impl local (bf16 works without it)"
        )


def te_pytorch(flag: str = TE_FLAGS[0]) -> ModuleType | Any:
    """transformer_engine.pytorch (or the stand-in set by `use_stand_in`)."""
    if _override is not None:
        return _override
    require_te(flag)
    return importlib.import_module("transformer_engine.pytorch")


def te_functional(flag: str = TE_FLAGS[0]) -> Any:
    """Transformer Engine's functional layer, as model/layers/te_fused.py calls it: general_gemm
    (transformer_engine.pytorch.cpp_extensions), rmsnorm_fwd / rmsnorm_bwd / swiglu / dswiglu
    (transformer_engine_torch), TE_DType (transformer_engine.pytorch.constants); or the stand-in's
    `functional` (use_stand_in)."""
    if _override is not None:
        return _override.functional
    require_te(flag)
    importlib.import_module("transformer_engine.pytorch")  # loads the core library (after torch: docs/gpu.md)
    gemm = importlib.import_module("transformer_engine.pytorch.cpp_extensions")
    tex = importlib.import_module("transformer_engine_torch")
    constants = importlib.import_module("transformer_engine.pytorch.constants")
    return SimpleNamespace(general_gemm=gemm.general_gemm, rmsnorm_fwd=tex.rmsnorm_fwd, rmsnorm_bwd=tex.rmsnorm_bwd,
                           swiglu=tex.swiglu, dswiglu=tex.dswiglu, TE_DType=constants.TE_DType)


def use_stand_in(module: Any) -> None:
    """Make `te_pytorch` return `module` (None restores the real import). For tests only: it lets
    a machine without a GPU check how SCALE composes TE's modules, never TE itself."""
    global _override
    _override = module


def check_te_flags(transformer_impl: str, fp8_format: str | None, fp8_recipe: str | None, bf16: bool,
                   device: str) -> None:
    """The Transformer Engine and FP8 flags, each needing the ones before it (the training entry
    and tools/bench_scale.py share these): ValueError naming the flag."""
    te = transformer_impl == "transformer_engine"
    if fp8_format is not None and not te:
        raise ValueError("--fp8-format needs --transformer-impl transformer_engine")
    if fp8_recipe is not None and fp8_format is None:
        raise ValueError("--fp8-recipe needs --fp8-format")
    if fp8_format is not None and not bf16:
        raise ValueError("--fp8-format needs --bf16 (FP8 GEMMs run inside bf16 training)")
    if not te:
        return
    if device == "cpu":
        raise ValueError("--transformer-impl transformer_engine needs --device cuda")
    try:
        require_te(TE_FLAGS[0])
    except RuntimeError as e:
        raise ValueError(str(e)) from e


def fp8_config(fp8_format: str | None, fp8_recipe: str | None) -> dict[str, Any]:
    """TransformerConfig fields for the FP8 flags (empty when FP8 is off)."""
    if fp8_format is None:
        return {}
    return {"fp8": fp8_format, "fp8_recipe": fp8_recipe or "delayed"}

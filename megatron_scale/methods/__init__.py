"""The continual pre-training methods, one class each (base.py: the protocol):

    Scale (scale.py)          SCALE-Preserve | -Adapt | -Route: the widened model; the base frozen
    Full (full.py)            megatron-core's GPTModel, every weight trains
    Freeze (freeze.py)        the input embedding and the bottom layers frozen
    LlamaPro (llama_pro.py)   identity blocks inserted (upscale/depth.py); only they train
    Lora (lora.py)            LoRA on the four linears of every layer; only the adapters train

A new method is one module here and one entry in METHOD_CLASSES; --method's choices (NAMES) and
the method flags (training/config.py MethodConfig) follow from this list.
"""

from __future__ import annotations

from megatron_scale.methods.base import Given, TrainingMethod
from megatron_scale.methods.freeze import Freeze
from megatron_scale.methods.full import Full
from megatron_scale.methods.llama_pro import LlamaPro
from megatron_scale.methods.lora import Lora
from megatron_scale.methods.scale import Scale
from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords

METHOD_CLASSES: tuple[type[TrainingMethod], ...] = (Scale, Full, Freeze, LlamaPro, Lora)
NAMES: tuple[str, ...] = tuple(name for cls in METHOD_CLASSES for name in cls.names)
"""--method's choices, in order."""
FLAG_CLASSES: tuple[type, ...] = tuple(cls.flags for cls in METHOD_CLASSES if cls.flags is not None)
"""Each method's flags (training/config.py MethodConfig inherits them all)."""

__all__ = ["FLAG_CLASSES", "METHOD_CLASSES", "NAMES", "Freeze", "Full", "Given", "LlamaPro", "Lora", "Scale",
           "TrainingMethod", "method_class", "recorded_method"]


def method_class(name: str) -> type[TrainingMethod]:
    """The class a --method value names."""
    for cls in METHOD_CLASSES:
        if name in cls.names:
            return cls
    raise ValueError(f"--method {name}: choose from {', '.join(NAMES)}")


def recorded_method(records: CheckpointRecords) -> TrainingMethod:
    """The method a checkpoint's records describe (its SCALE geometry, its LoRA rank and alpha, or
    neither: a plain model, built as `Full`): the one class whose `from_record` answers."""
    found = [m for cls in METHOD_CLASSES if (m := cls.from_record(records)) is not None]
    if len(found) != 1:
        raise CheckpointError(f"{records.directory}: its scale record {sorted(records.scale or {})} describes "
                              f"{len(found)} training methods ({', '.join(m.name for m in found) or 'none'}), not one")
    return found[0]

"""Checkpoint conversion: Hugging Face <-> megatron-core, and base -> SCALE checkpoints."""

from megatron_scale.convert.hf_config import ConversionError
from megatron_scale.convert.to_hf import convert_megatron_to_hf
from megatron_scale.convert.to_megatron import convert_hf_to_megatron
from megatron_scale.convert.offline_upscale import upscale_checkpoint

__all__ = ["ConversionError", "convert_hf_to_megatron", "convert_megatron_to_hf", "upscale_checkpoint"]

"""Upscaling a base model into a SCALE model (pure tensors; no process group)."""

from megatron_scale.upscale.expand import load_upscaled, upscale_state_dict

__all__ = ["load_upscaled", "upscale_state_dict"]

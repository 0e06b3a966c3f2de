"""megatron-scale: SCALE upscaled continual pre-training on Megatron-Core."""

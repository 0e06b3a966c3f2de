"""Hugging Face modeling code for exported SCALE models (copied into each exported folder)."""

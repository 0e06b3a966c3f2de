"""The Korean recipe (examples/scale_korean.sh launches it): its settings (settings.py), its steps
and what each skips when done (steps.py, driven through `python -m megatron_scale.recipe`). What
its report, samples and frontier say is megatron_scale/reports/'s; lm-evaluation-harness over the
exports is megatron_scale/evaluation/harness.py."""

"""The Korean recipe (examples/scale_korean.sh launches it): its settings (settings.py), its steps
and what each skips when done (steps.py, driven through `python -m megatron_scale.recipe`), the
forgetting/learning report (report.py) and lm-evaluation-harness over exported models (harness.py)."""

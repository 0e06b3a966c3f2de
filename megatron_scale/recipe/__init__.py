"""The Korean recipe's glue (examples/scale_korean.sh): model arguments for export, the
forgetting/learning report, and lm-evaluation-harness over exported models."""

"""Offline benchmark accuracy (multiple choice, lm-evaluation-harness's definitions) and bits per
byte; beside them the model passes of SCALE-Route's measurements (route_records.py, route_sweep.py,
capture.py), whose records route_eval/ analyses."""

from megatron_scale.evaluation.benchmarks import Scorer, evaluate, hf_scorer
from megatron_scale.evaluation.tasks import TASKS, Item, TaskError, load_task

__all__ = ["TASKS", "Item", "Scorer", "TaskError", "evaluate", "hf_scorer", "load_task"]

"""Benchmarks of exported Hugging Face models with EleutherAI's lm-evaluation-harness (pinned in
pyproject.toml), the paper's tasks by default: ARC (easy, challenge), HellaSwag, MMLU,
TruthfulQA (mc2), Winogrande, and KoBEST for Korean.

The Hugging Face Hub is never contacted unless asked (`allow_downloads`): the paper's tasks need
their datasets in the local HF cache (fetch them once where there is network), and tasks defined
over local files (`include_path`, a folder of task YAMLs whose `dataset_kwargs.data_files` name
local JSONL) need nothing. SCALE exports load with trust_remote_code (their modeling file ships in
the folder); plain Llama exports load as LlamaForCausalLM.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from megatron_scale.durable import atomic_write

PAPER_TASKS = ("arc_easy", "arc_challenge", "hellaswag", "mmlu", "truthfulqa_mc2", "winogrande", "kobest")


def evaluate(model: str | os.PathLike, tasks: list[str], *, include_path: str | None = None,
             batch_size: int = 8, device: str = "cpu", dtype: str = "float32", limit: float | None = None,
             num_fewshot: int | None = None, allow_downloads: bool = False) -> dict[str, Any]:
    """Run the harness on one exported model; returns {task: {metric: value}} plus the settings."""
    if not allow_downloads:
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            os.environ[var] = "1"
    folder = Path(model)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"--model {folder}: not a Hugging Face model folder (no config.json)")
    import lm_eval
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=include_path)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise ValueError(f"--tasks: unknown to lm-evaluation-harness {lm_eval.__version__}: {unknown}"
                         + ("" if include_path else " (local task YAMLs go in --include-path)"))
    out = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(folder), "trust_remote_code": True, "dtype": dtype},
        tasks=tasks, task_manager=manager, batch_size=batch_size, device=device, limit=limit,
        num_fewshot=num_fewshot, log_samples=False,
    )
    assert out is not None  # None only on non-zero ranks of a multi-process run
    results = {task: {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k != "alias"}
               for task, metrics in out["results"].items()}
    return {"model": str(folder), "tasks": tasks, "lm_eval_version": lm_eval.__version__,
            "num_fewshot": num_fewshot, "limit": limit, "results": results}


def write(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Write the results JSON atomically."""
    atomic_write(path, json.dumps(record, indent=2) + "\n")

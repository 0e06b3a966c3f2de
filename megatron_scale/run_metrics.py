"""Reading a training run's metrics JSONL (training/loop.py writes it): its evaluation records and
its start record. Standard library only, so that the reports, the recipe's side and the
evaluation runners (evaluation/splice.py) read runs the same way without importing each other."""

from __future__ import annotations

import json
import os
from pathlib import Path


def evaluations(metrics: str | os.PathLike) -> dict[int, dict[str, dict]]:
    """Every `eval/<name>` record of a metrics JSONL file, by iteration then set name."""
    path = Path(metrics)
    if not path.is_file():
        raise FileNotFoundError(f"metrics file {path} does not exist (did the run finish?)")
    evals: dict[int, dict[str, dict]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e})") from e
        kind = rec.get("kind", "")
        if kind.startswith("eval/"):
            evals.setdefault(rec["iteration"], {})[kind[5:]] = rec
    if not evals:
        raise ValueError(f"{path}: no evaluation records (run with --eval-interval and --eval-data-path)")
    return evals


def start_record(metrics: str | os.PathLike) -> dict:
    """A run's "start" record (training/loop.py: its settings), {} where it has none."""
    for line in Path(metrics).read_text().splitlines():
        if line.startswith('{"kind": "start"'):
            return json.loads(line)
    return {}

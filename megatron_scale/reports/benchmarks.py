"""The report's benchmark section: accuracy of the base and of every method on the same documents
(tools/eval_benchmarks.py's JSON per model), and each method's change against the base.

The accuracy shown per task is acc_norm where lm-evaluation-harness reports it (ARC, HellaSwag,
PIQA, OpenBookQA, MMLU's cloze form), else acc (Winogrande, MMLU, BoolQ, ...), in percent with
its standard error. The change is paired: over the documents both models answered, the mean of
(after - before) per document with the standard error of that mean. Pairing removes the
documents' own difficulty from the comparison, so it resolves smaller changes than the two
accuracies' standard errors suggest; the models must have scored the same documents (the same
--limit and --seed), or this is an error.

Standard library only; kept apart from reports/recipe.py's perplexity table so either can change alone.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from megatron_scale import method_catalog as catalog


def load_scores(path: str | os.PathLike) -> dict[str, Any]:
    """tools/eval_benchmarks.py's JSON, checked to hold per-item scores."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--benchmarks {p}: no such file (did the benchmark step run?)")
    try:
        record = json.loads(p.read_text())
        for task, r in record["results"].items():
            if not r["per_item"] or any("acc" not in i or "doc_id" not in i for i in r["per_item"]):
                raise ValueError(f"task {task} has no per-item scores")
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"--benchmarks {p}: not tools/eval_benchmarks.py's output ({type(e).__name__}: {e})") from e
    record["path"] = str(p)
    return record


def metric(result: dict[str, Any]) -> str:
    """acc_norm where the task reports it, else acc."""
    return "acc_norm" if "acc_norm" in result else "acc"


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample standard deviation; NaN below two values)."""
    n = len(values)
    mu = sum(values) / n
    if n < 2:
        return mu, math.nan
    return mu, math.sqrt(sum((v - mu) ** 2 for v in values) / (n - 1) / n)


def paired_change(before: dict[str, Any], after: dict[str, Any], key: str, where: str) -> tuple[float, float]:
    """Mean and standard error of after - before over the same documents (per-item `key`)."""
    b = {i["doc_id"]: float(i[key]) for i in before["per_item"]}
    a = {i["doc_id"]: float(i[key]) for i in after["per_item"]}
    if a.keys() != b.keys():
        raise ValueError(f"{where}: scored other documents than the base ({len(a.keys() ^ b.keys())} differ); "
                         "score every model with the same --limit and --seed")
    return mean_stderr([a[d] - b[d] for d in sorted(b)])


def section(models: dict[str, str], base: str = "base") -> dict[str, Any]:
    """{"numbers": per model and task, "section": markdown}; `models` maps a model's name to its
    JSON, `base` first among them."""
    if base not in models:
        raise ValueError(f"--benchmarks: no {base}=FILE (the accuracy before)")
    scores = {name: load_scores(path) for name, path in models.items()}
    tasks = list(scores[base]["results"])
    for s in scores.values():
        if missing := [t for t in tasks if t not in s["results"]]:
            raise ValueError(f"--benchmarks {s['path']}: no {missing} (the base scored {tasks})")
    numbers: dict[str, Any] = {}
    rows = []
    for name, s in scores.items():
        cells, numbers[name] = [], {}
        for task in tasks:
            r, ref = s["results"][task], scores[base]["results"][task]
            key = metric(ref)
            value, err = float(r[key]), float(r[f"{key}_stderr"])
            entry: dict[str, Any] = {"metric": key, "value": value, "stderr": err, "n": r["n"]}
            cells.append(_pct(value, err))
            if name != base:
                change, change_err = paired_change(ref, r, key, f"--benchmarks {s['path']}, {task}")
                entry.update(change=change, change_stderr=change_err)
                cells.append(_points(change, change_err))
            else:
                cells.append("")
            numbers[name][task] = entry
        label = catalog.label(name) if name != base else "base"
        rows.append(f"| {label} | {' | '.join(cells)} |")
    head = [c for t in tasks for c in (f"{t} {metric(scores[base]['results'][t])} (%)", f"{t} change (points)")]
    ref = scores[base]["results"][tasks[0]]
    n = {t: scores[base]["results"][t]["n"] for t in tasks}
    text = (f"\n## Benchmark accuracy before and after\n\n"
            f"tools/eval_benchmarks.py on each checkpoint ({ref.get('num_fewshot', 0)}-shot; documents per task: {', '.join(f'{t} {k}' for t, k in n.items())}, "
            f"seed {ref.get('seed')}). "
            "Accuracy ± one standard error; change: paired over the same documents, ± its standard error."
            + (" Chance (a uniform guess): " + ", ".join(f"{t} {100 * scores[base]['results'][t]['chance']:.1f} %"
                                                         for t in tasks if "chance" in scores[base]["results"][t]) + "."
               if any("chance" in scores[base]["results"][t] for t in tasks) else "") + "\n\n"
            f"| model | {' | '.join(head)} |\n" + "|" + "---|" * (len(head) + 1) + "\n" + "\n".join(rows) + "\n")
    return {"numbers": numbers, "section": text}


def _pct(value: float, err: float) -> str:
    return f"{100 * value:.1f}" + (f" ± {100 * err:.1f}" if not math.isnan(err) else "")


def _points(change: float, err: float) -> str:
    return f"{100 * change:+.1f}" + (f" ± {100 * err:.1f}" if not math.isnan(err) else "")

"""Accuracy of multiple-choice answers from log-likelihoods, as lm-evaluation-harness defines it.

For one document with choices c_i and summed log-likelihoods ll_i of their continuations
(lm_eval.api.task.ConfigurableTask.process_results, output_type multiple_choice):

    acc      = [argmax_i ll_i == gold]
    acc_norm = [argmax_i ll_i / len(c_i) == gold]     len: characters of the choice's text,
                                                      without the target delimiter (" ")

A task's score is the mean over documents, and its standard error the harness's `mean_stderr`:
the sample standard deviation (n - 1) over sqrt(n). numpy's argmax takes the first of equal
maxima, as the harness does. tests/evaluation/test_scoring.py holds these equal to the harness's
own functions on the same items. Beside them: `chance`, the accuracy of a uniform guess (the mean
over documents of 1 / choices), and `macro_f1` (the harness's KoBEST tasks' f1: scikit-learn's
f1_score(golds, preds, average="macro") over the labels either side holds; tests/evaluation/test_kobest.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def choice_length(continuation: str, delimiter: str = " ") -> int:
    """Characters of a choice's text: the continuation less its leading target delimiter."""
    return len(continuation[len(delimiter):] if continuation.startswith(delimiter) else continuation)


def _argmax(xs: Sequence[float]) -> int:
    best = 0
    for i, x in enumerate(xs):
        if x > xs[best]:
            best = i
    return best


def item_scores(lls: Sequence[float], continuations: Sequence[str], gold: int) -> dict[str, float]:
    """acc and acc_norm of one document (1.0 or 0.0), and the two predictions."""
    norm = [ll / choice_length(c) for ll, c in zip(lls, continuations, strict=True)]
    pred, pred_norm = _argmax(lls), _argmax(norm)
    return {"acc": float(pred == gold), "acc_norm": float(pred_norm == gold), "pred": pred, "pred_norm": pred_norm}


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) with the sample standard deviation (n - 1); the
    error is NaN for fewer than two values, as the harness's statistics.stdev would refuse them."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to average")
    mu = sum(values) / n
    if n < 2:
        return mu, math.nan
    var = sum((v - mu) ** 2 for v in values) / (n - 1)
    return mu, math.sqrt(var / n)


def chance(choices: Sequence[int]) -> float:
    """The expected accuracy of a uniform random answer: the mean of 1 / (choices of each document)."""
    if not choices or min(choices) < 1:
        raise ValueError(f"chance: every document needs a choice, got {list(choices)[:5]}")
    return sum(1 / k for k in choices) / len(choices)


def macro_f1(golds: Sequence[int], preds: Sequence[int]) -> float:
    """The unweighted mean over the labels in golds or preds of each label's F1, 2 TP / (2 TP + FP + FN)
    (a label with no true or predicted document scores 0, as scikit-learn's zero_division does)."""
    if len(golds) != len(preds) or not golds:
        raise ValueError(f"macro_f1: {len(golds)} golds and {len(preds)} predictions")
    scores = []
    for label in sorted(set(golds) | set(preds)):
        tp = sum(g == label and p == label for g, p in zip(golds, preds))
        wrong = sum((g == label) != (p == label) for g, p in zip(golds, preds))
        scores.append(2 * tp / (2 * tp + wrong) if tp else 0.0)
    return sum(scores) / len(scores)

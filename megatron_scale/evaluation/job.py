"""One evaluation's settings and its work on any model: the benchmarks (benchmarks.evaluate) and
the held-out text (perplexity.text_loss), as tools/eval_benchmarks.py asks for them.

A Job is plain data, so it travels to the ranks of a Megatron evaluation (megatron.py) and every
rank does the same work in the same order (the ranks of one model meet in its collectives).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from megatron_scale.evaluation.benchmarks import Scorer, evaluate
from megatron_scale.evaluation.perplexity import held_out_sets, text_loss


@dataclass(frozen=True, kw_only=True)
class Job:
    """What to evaluate (tools/eval_benchmarks.py's flags)."""

    tasks: tuple[str, ...]
    """Benchmark tasks (tasks.TASKS)."""
    limit: int | None = None
    """Documents per task drawn with `seed` (None: all)."""
    seed: int = 1234
    """Seed of the --limit subset."""
    variants: dict[str, str] = field(default_factory=dict)
    """Another task file variant per task."""
    batch_tokens: int = 4096
    """Padded tokens per forward."""
    text_sets: tuple[str, ...] = ()
    """Held-out text sets (perplexity.held_out_sets) scored for perplexity and bits per byte."""
    text_tokens: int = 20000
    """Scored tokens per text set (whole documents)."""
    text_window: int = 512
    """Tokens per window of the text sets."""

    def check(self) -> None:
        """The text sets exist (the tasks are checked as they load)."""
        known = held_out_sets()
        if unknown := [t for t in self.text_sets if t not in known]:
            raise ValueError(f"--text-sets: unknown {unknown} (known: {', '.join(known)})")

    def run(self, scorer: Scorer, say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
        """{"results": per task, "text": per held-out set}."""
        results = evaluate(scorer, self.tasks, limit=self.limit, seed=self.seed, variants=self.variants,
                           batch_tokens=self.batch_tokens, say=say)
        text = {}
        known = held_out_sets()
        for name in self.text_sets:
            if scorer.decode is None:
                raise ValueError("--text-sets: this model's scorer has no decode")
            text[name] = text_loss(scorer.logits, scorer.encode, scorer.decode, known[name](),
                                   prefix_id=scorer.prefix_id, window=self.text_window, max_tokens=self.text_tokens)
            say(f"{name}: " + " ".join(f"{k}={v:.4g}" for k, v in text[name].items()))
        return {"results": results, "text": text}

"""When a biography stage evaluates and when it stops (bio/protocol.py run_stage): the task-1
frontier's cells must lie between two evaluations that bracket them (issue 44), so fast learners
get dense evaluations early and slower ones while they move fast."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalPlan:
    """When a stage evaluates and when it stops: at step 0, every `interval` steps, also every
    `dense_interval` steps up to `dense_until` (fast learners cross a table's levels early), with
    `dense_gap` also every `dense_interval` steps while the last evaluations' task-1 accuracy,
    extrapolated over `interval` steps, moves by more than `dense_gap` (slower learners cross them
    later, as fast), and at the end; with `stop_at`, it ends after the first evaluation whose task-1 accuracy is at least
    that (the stage's iterations are then a hard cap). `baseline` records, at every evaluation
    (only the last is kept, so only it is computed) each probe against the stage's step-0 model
    (evaluate.baseline_records); `heads` records a SCALE model's two heads (evaluate.answer_records:
    Route's router on it)."""

    interval: int
    dense_until: int = 0
    dense_interval: int = 10
    stop_at: float | None = None
    dense_gap: float | None = None
    baseline: bool = False
    heads: bool = False

    def due(self, step: int, iters: int, last: tuple[tuple[int, float], ...] = ()) -> bool:
        """Whether to evaluate at `step`, given the last two evaluations' (step, task-1 accuracy)."""
        if step % self.interval == 0 or step == iters or (step <= self.dense_until and step % self.dense_interval == 0):
            return True
        if self.dense_gap is None or len(last) < 2 or step % self.dense_interval:
            return False
        (s0, a0), (s1, a1) = last[-2:]
        return abs(a1 - a0) * self.interval / max(s1 - s0, 1) > self.dense_gap

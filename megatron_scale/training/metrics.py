"""Megatron-style progress lines on one rank, a JSONL file of every record, TensorBoard on request.

The logging rank is the last pipeline stage's first TP and DP rank: it holds the loss."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megatron_scale.scale_config import ROUTER_DIRECTIONS, ROUTER_STATISTICS, ROUTER_UNITS, Router, RouterOverride
from megatron_scale.flags import check_iterations, flag, positive


@dataclass(kw_only=True)
class LoggingConfig:
    """Evaluation and logging."""

    eval_interval: int | None = field(default=None, metadata=flag("--eval-interval"))
    """Evaluate every N iterations, and before the first (the 'before' numbers) unless
    --no-eval-at-start or resuming."""
    eval_iterations: tuple[int, ...] = field(default=(), metadata=flag("--eval-iterations", metavar="ITER"))
    """Evaluate at exactly these iterations instead of every --eval-interval (0: before the first step,
    unless resuming), e.g. 0 2 4 8 16 32 64 96: dense early evaluations, so a learning curve has
    measured points where it moves fastest."""
    eval_at_start: bool = field(default=True, metadata=flag("--eval-at-start", negate="--no-eval-at-start"))
    """With --eval-interval: no evaluation at iteration 0."""
    eval_iters: int = field(default=2, metadata=flag("--eval-iters"))
    """Global batches per evaluation of each set."""
    route_tau: float | None = field(default=None, metadata=flag("--route-tau"))
    """scale-route: evaluate with this tau instead of the model's (checkpoints keep theirs)."""
    route_statistic: str | None = field(default=None, metadata=flag("--route-statistic", choices=ROUTER_STATISTICS))
    """scale-route: evaluate with this router statistic instead of the model's."""
    route_direction: str | None = field(default=None, metadata=flag("--route-direction", choices=ROUTER_DIRECTIONS))
    """scale-route: evaluate with this router direction (above: keep z_p where statistic >= tau;
    below: where <= tau) instead of the model's."""
    route_unit: str | None = field(default=None, metadata=flag("--route-unit", choices=ROUTER_UNITS))
    """scale-route: evaluate with this router unit (token | char | word: all tokens of one UTF-8
    character or word take their first token's decision; char/word need --tokenizer-model, a
    byte-level BPE) instead of the model's."""
    log_interval: int = field(default=1, metadata=flag("--log-interval"))
    """Log a training line every N iterations."""
    metrics_file: str | None = field(default=None, metadata=flag("--metrics-file"))
    """JSONL metrics (default: <save>/metrics.jsonl)."""
    tensorboard_dir: str | None = field(default=None, metadata=flag("--tensorboard-dir"))
    """TensorBoard event files go here."""
    peak_tflops: float | None = field(default=None, metadata=flag("--peak-tflops"))
    """The GPU's peak TFLOP/s (H100/H200 SXM dense bf16: 989; FP8: 1979): the log then gives MFU,
    both attention conventions (training/throughput.py)."""

    def validate(self, method: str, routes: bool, train_iters: int | None = None) -> None:
        """`method`: the --method value; `routes`: whether its model routes (TrainingMethod.routes);
        `train_iters`: --train-iters, which the evaluation schedule must not pass."""
        positive(("--log-interval", self.log_interval), ("--eval-iters", self.eval_iters),
                  ("--eval-interval", self.eval_interval))
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            raise ValueError(f"--peak-tflops {self.peak_tflops}: must be > 0")
        if self.eval_iterations:
            if self.eval_interval is not None:
                raise ValueError("--eval-iterations and --eval-interval: give one schedule of evaluations, not both")
            check_iterations("--eval-iterations", self.eval_iterations, train_iters, first=0)
        given = self.route.given_flags("--route-")
        if given and not routes:
            raise ValueError(f"{given[0]}: only a --method scale-route model routes; this run is --method {method}")
        self.route.over(Router()).check("--route-")

    @property
    def route(self) -> RouterOverride:
        """The router settings evaluation takes in place of the model's (--route-*; None: the model's)."""
        return RouterOverride(tau=self.route_tau, statistic=self.route_statistic, direction=self.route_direction,
                              unit=self.route_unit)

    def evaluates_at(self, iteration: int) -> bool:
        """Whether the run evaluates after `iteration` steps (0: before the first, when not resuming)."""
        if self.eval_iterations:
            return iteration in self.eval_iterations
        if not self.eval_interval:
            return False
        return self.eval_at_start if iteration == 0 else iteration % self.eval_interval == 0


def _throughput(v: dict[str, Any]) -> str:
    """Megatron-LM's 'throughput per GPU (TFLOP/s/GPU)' and the MFU, each with its causal twin."""
    if "tflops_per_gpu" not in v:
        return ""
    part = (f" | throughput per GPU (TFLOP/s/GPU): {v['tflops_per_gpu']:.1f}"
            f" (causal {v['tflops_per_gpu_causal']:.1f})")
    if "mfu" in v:
        part += f" | MFU: {v['mfu']:.3f} (causal {v['mfu_causal']:.3f})"
    return part


class MetricsLog:
    def __init__(self, *, active: bool, jsonl: str | None, tensorboard_dir: str | None, train_iters: int) -> None:
        self.active = active
        self.train_iters = train_iters
        self.start = time.monotonic()
        self._file = None
        self._tb = None
        if not active:
            return
        if jsonl:
            Path(jsonl).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(jsonl, "a", buffering=1)  # noqa: SIM115 - closed in close()
        if tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise RuntimeError("--tensorboard-dir needs the tensorboard package (pip install tensorboard)") from e
            self._tb = SummaryWriter(tensorboard_dir)

    def record(self, kind: str, iteration: int, values: dict[str, Any]) -> None:
        if not self.active:
            return
        if self._file:
            self._file.write(json.dumps({"kind": kind, "iteration": iteration, **values}) + "\n")
        if self._tb:
            for k, v in values.items():
                if isinstance(v, int | float) and math.isfinite(v):
                    self._tb.add_scalar(f"{kind}/{k}", v, iteration)

    def train_line(self, iteration: int, v: dict[str, Any]) -> None:
        if not self.active:
            return
        elapsed = time.monotonic() - self.start
        done = max(iteration - v.get("start_iteration", 0), 1)
        eta = elapsed / done * (self.train_iters - iteration)
        print(
            f" iteration {iteration:8d}/{self.train_iters:8d} | consumed samples: {v['consumed_samples']:12d}"
            f" | elapsed time per iteration (ms): {v['step_time'] * 1000:.1f}"
            f" | learning rate: {v['lr']:.6E} | global batch size: {v['global_batch_size']:5d}"
            f" | lm loss: {v['lm_loss']:.6E} | grad norm: {v['grad_norm']:.3f}"
            f" | tokens/s: {v['tokens_per_s']:.0f}{_throughput(v)} | ETA: {time.strftime('%H:%M:%S', time.gmtime(eta))}",
            flush=True,
        )
        self.record("train", iteration, v)

    def eval_line(self, iteration: int, results: dict[str, dict[str, float]]) -> None:
        if not self.active:
            return
        parts = []
        for name, r in results.items():
            part = f"{name} lm loss: {r['lm_loss']:.6E} | {name} PPL: {r['ppl']:.4E}"
            if "preserve_fraction" in r:
                part += f" | {name} routed to preservation head: {r['preserve_fraction']:.3f}"
            parts.append(part)
        print(f" validation at iteration {iteration} | " + " | ".join(parts), flush=True)
        for name, r in results.items():
            self.record(f"eval/{name}", iteration, r)

    def close(self) -> None:
        if self._file:
            self._file.close()
        if self._tb:
            self._tb.close()

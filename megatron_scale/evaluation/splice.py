"""The vocabulary-splice control (science review 5, run C1): the base's logits everywhere, a
fine-tuned model's on one script's vocabulary rows only, scored on a training run's own
evaluation windows, so that it stands on the frontier as a run does.

SCALE-Preserve with `--scale-output-rows hangul` moves only the Hangul rows' logits (its z_a is z_p,
the base, on every other row). The splice asks whether that, and not SCALE's new width, is what
keeps English: it takes the rows' logits from a model that learned Korean with no width at all
(full fine-tuning), and everything else from the base:

    spliced = where(rows, tuned, base)         over the model's (padded) vocabulary, per position

with `rows` the very set `--scale-output-rows` trains (model/layers/output_rows.py script_rows, from
the tokenizer's bytes). Per predicted token with label y, the spliced loss is

    loss = logaddexp(lse(base off the rows), lse(tuned on the rows)) - (tuned if y in rows else base)[y]

so one model's pass reduces to three numbers per token (`Sides`: the log-sum-exp on and off the
rows, the label's logit), and one pass of the base serves every checkpoint of the run. `splice`
and `spliced_loss` are exactly equal (test: tests/evaluation/test_splice.py, on hand-made logits).

`splice_run` scores a run's saved checkpoints (iter_*) against its base checkpoint on the windows
its start record names (training's evaluation windows: --eval-data-path, --seq-length,
--eval-iters x --global-batch-size, --eval-seed; evaluation/route_records.py eval_windows) and writes a
metrics.jsonl a frontier reads as it reads a run's (reports/recipe_frontier.py): the run's start
record, then eval/<set> records at iteration 0 (the base) and at each checkpoint's iteration. Two
checks make the windows the run's: the base's own loss equals the run's iteration-0 evaluation, and
each checkpoint's own loss its evaluation at that iteration (where it evaluated), to TOLERANCE.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

TOLERANCE = 1e-4
"""Relative: a model's own loss on the windows against the run's evaluation of the same windows."""
Logits = Callable[[torch.Tensor], torch.Tensor]  # tokens [b, s] -> logits [b, s, V]


def splice(base: torch.Tensor, tuned: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """[..., V] logits: `tuned`'s on the rows ([V] bool), `base`'s everywhere else."""
    if base.shape != tuned.shape or rows.shape != base.shape[-1:]:
        raise ValueError(f"splice: logits {tuple(base.shape)} and {tuple(tuned.shape)}, rows {tuple(rows.shape)}")
    return torch.where(rows.to(base.device), tuned, base)


@dataclass(frozen=True)
class Sides:
    """One model's logits reduced per predicted token (flattened, float64): what a splice needs."""

    on: torch.Tensor
    """log-sum-exp of the logits on the rows."""
    off: torch.Tensor
    """log-sum-exp of the logits off the rows."""
    target: torch.Tensor
    """The label's logit."""
    label_on: torch.Tensor
    """Whether the label is one of the rows (bool)."""
    labels: torch.Tensor
    """The labels themselves (int64): two passes spliced must have scored the same."""

    def loss(self) -> torch.Tensor:
        """The model's own cross-entropy per token (nats)."""
        return torch.logaddexp(self.on, self.off) - self.target

    @staticmethod
    def cat(parts: Sequence[Sides]) -> Sides:
        return Sides(*(torch.cat([getattr(p, k) for p in parts]) for k in ("on", "off", "target", "label_on", "labels")))


def sides(logits: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor) -> Sides:
    """The Sides of logits [..., V] for labels [...] (rows: [V] bool, some rows on each side)."""
    if not bool(rows.any()) or bool(rows.all()):
        raise ValueError(f"splice rows: {int(rows.sum())} of {rows.numel()}; the splice needs rows on both sides")
    z = logits.reshape(-1, logits.shape[-1]).double()
    y = labels.reshape(-1).to(z.device)
    r = rows.to(z.device)
    neg = torch.tensor(-math.inf, dtype=z.dtype, device=z.device)
    on = torch.where(r, z, neg).logsumexp(-1)
    off = torch.where(r, neg, z).logsumexp(-1)
    return Sides(on.cpu(), off.cpu(), z.gather(1, y[:, None])[:, 0].cpu(), r[y].cpu(), y.long().cpu())


def spliced_loss(base: Sides, tuned: Sides) -> torch.Tensor:
    """Per token, the cross-entropy of splice(base, tuned, rows): see the module's text."""
    if not (torch.equal(base.labels, tuned.labels) and torch.equal(base.label_on, tuned.label_on)):
        raise ValueError("splice: the two passes scored other labels (or other rows)")
    return torch.logaddexp(base.off, tuned.on) - torch.where(tuned.label_on, tuned.target, base.target)


def window_sides(logits: Logits, windows: Mapping[str, torch.Tensor], rows: torch.Tensor,
                 batch_size: int) -> dict[str, Sides]:
    """Per set, the Sides of one model (`logits`) on windows [n, s + 1] (inputs, then shifted labels)."""
    out = {}
    for name, ids in windows.items():
        parts = [sides(logits(chunk[:, :-1].contiguous()), chunk[:, 1:], rows)
                 for chunk in ids.split(batch_size)]
        out[name] = Sides.cat(parts)
    return out


def _rank(load: str, windows: dict[str, torch.Tensor], pieces: list[bytes], script: str, batch_size: int, *,
          device: torch.device) -> dict[str, dict[str, torch.Tensor]]:
    from megatron_scale.evaluation.megatron import model_logits
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.model.layers.output_rows import script_rows

    loaded = load_model(load, Parallel(), device)
    model, vocab = loaded.model.eval(), loaded.reader.model_args().vocab_size
    rows: list[torch.Tensor] = []

    def logits(ids: torch.Tensor) -> torch.Tensor:
        z = model_logits(model, ids, vocab)
        if not rows:  # the padded vocabulary: the logits' own width
            rows.append(script_rows(pieces, z.shape[-1], script))
        return z

    with torch.no_grad():
        first = next(iter(windows.values()))
        logits(first[:1, :-1])  # rows from the logits' width, before any set is scored
        got = window_sides(logits, windows, rows[0], batch_size)
    return {n: vars(s) for n, s in got.items()} | {"": {"rows": rows[0]}}


def checkpoint_sides(load: str | os.PathLike, windows: Mapping[str, torch.Tensor], pieces: list[bytes],
                     script: str, batch_size: int) -> tuple[dict[str, Sides], torch.Tensor]:
    """A Megatron checkpoint's Sides on each set's windows (one rank, spawned: launch.on_ranks), and
    the rows ([V] bool over its padded vocabulary)."""
    from megatron_scale.launch import on_ranks

    got = on_ranks(_rank, 1, 1, str(load), dict(windows), pieces, script, batch_size)[0]
    rows = got.pop("")["rows"]
    return {n: Sides(**d) for n, d in got.items()}, rows


def _start(metrics: Path) -> dict[str, Any]:
    from megatron_scale.run_metrics import start_record

    start = start_record(metrics)
    need = ("seq_length", "global_batch_size", "eval_iters", "eval_data")
    missing = [k for k in need if start.get(k) is None] + (["eval_seed"] if "eval_seed" not in start else [])
    if missing:
        raise ValueError(f"{metrics}: its start record lacks {', '.join(missing)} (a run from before they were "
                         "recorded: its evaluation windows cannot be rebuilt)")
    return start


def checkpoints(run_dir: Path, iterations: Sequence[int] | None) -> dict[int, Path]:
    """A run's saved checkpoints iter_NNNNNNN (those at `iterations`, each of which must exist), by iteration."""
    found = {int(m[1]): p for p in sorted(run_dir.glob("iter_*"))
             if p.is_dir() and (m := re.fullmatch(r"iter_(\d+)", p.name)) and int(m[1]) > 0}
    if iterations is not None:
        missing = sorted(set(iterations) - set(found))
        if missing:
            raise ValueError(f"--iterations {missing}: {run_dir} has no such checkpoint (it has {sorted(found)})")
        found = {i: found[i] for i in sorted(iterations)}
    if not found:
        raise ValueError(f"--run {run_dir}: no saved checkpoint iter_* (train it with SAVE_ITERATIONS)")
    return found


def _check(own: float, want: float, what: str) -> None:
    if abs(own - want) > TOLERANCE * abs(want):
        raise ValueError(f"{what}: {own:.6f} on the rebuilt windows, the run's evaluation {want:.6f}: other windows "
                         "(or another model) than the run evaluated")


def splice_run(run_dir: str | os.PathLike, base: str | os.PathLike, tokenizer: str | os.PathLike,
               out: str | os.PathLike, *, script: str = "hangul", iterations: Sequence[int] | None = None,
               batch_size: int = 2, score: Callable[..., tuple[dict[str, Sides], torch.Tensor]] = checkpoint_sides,
               say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The splice of every saved checkpoint of `run_dir` (a training run's --save folder, holding its
    metrics.jsonl) with `base` (the checkpoint it started from), written as OUT/runs/<run>/metrics.jsonl;
    returns a summary. `score` is checkpoint_sides (a seam for tests)."""
    from megatron_scale.durable import atomic_write
    from megatron_scale.data.tokenizer import token_bytes
    from megatron_scale.run_metrics import evaluations
    from megatron_scale.evaluation.route_records import eval_windows

    from megatron_scale.model.layers.output_rows import SCRIPTS

    if script not in SCRIPTS:
        raise ValueError(f"--script {script}: choose one of {', '.join(SCRIPTS)}")
    run = Path(run_dir)
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"--run {run}: no metrics.jsonl (a training run's --save folder)")
    if not Path(base).is_dir():
        raise ValueError(f"--base {base}: no such checkpoint directory")
    start, evals = _start(metrics), evaluations(metrics)
    if 0 not in evals:
        raise ValueError(f"{metrics}: no iteration-0 evaluation (the base's, which the base pass is checked against)")
    found = checkpoints(run, iterations)
    pieces = token_bytes(tokenizer)
    samples = int(start["eval_iters"]) * int(start["global_batch_size"])
    seed = int(start["seed"] if start["eval_seed"] is None else start["eval_seed"])  # training's default: --seed
    windows = {n: eval_windows(p, int(start["seq_length"]), samples, 0, seed, flag=f"eval set {n}")
               for n, p in start["eval_data"].items()}
    base_sides, rows = score(base, windows, pieces, script, batch_size)
    lines = [json.dumps({**start, "splice": {"of": str(run), "base": str(base), "script": script,
                                             "rows": int(rows.sum()), "vocabulary": rows.numel(),
                                             "checkpoints": sorted(found)}})]
    summary: dict[str, Any] = {"rows": int(rows.sum()), "iterations": [0, *found], "loss": {}}

    def record(it: int, name: str, loss: float, tuned: float, s: Sides) -> None:
        ran = evals.get(it, {}).get(name)
        rec = {"kind": f"eval/{name}", "iteration": it, "lm_loss": loss, "ppl": math.exp(min(loss, 50.0)),
               "tuned_lm_loss": tuned, "targets_on_rows": float(s.label_on.double().mean())}
        if ran is not None:
            rec["run_lm_loss"] = float(ran["lm_loss"])
        lines.append(json.dumps(rec))
        summary["loss"].setdefault(name, {})[it] = loss

    for name, s in base_sides.items():
        own = float(s.loss().mean())
        _check(own, float(evals[0][name]["lm_loss"]), f"--base {base}: {name}'s loss")
        record(0, name, own, own, s)
    for it, path in found.items():
        say(f"iteration {it}: {path}")
        tuned, _ = score(path, windows, pieces, script, batch_size)
        for name, s in tuned.items():
            own = float(s.loss().mean())
            if name in evals.get(it, {}):
                _check(own, float(evals[it][name]["lm_loss"]), f"{path}: {name}'s loss")
            record(it, name, float(spliced_loss(base_sides[name], s).mean()), own, s)
    dest = Path(out) / "runs" / run.name / "metrics.jsonl"
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dest, "\n".join(lines) + "\n")
    return {"metrics": str(dest), **summary}

"""The files the recipe's steps pass on, each described once: where it lives, who writes it, who
reads it, what in it the readers rely on, and when it is current.

A step of the recipe (megatron_scale/recipe/steps.py) writes files that a later step or a report
reads, and a requeued or repeated job skips a step whose output is current. For each such file
this module says where it lives (relative to $WORKDIR: `Artifact.path`; its file name, for a writer
given only the folder: `Artifact.name`), who writes it, who reads it, what in it the readers rely
on, and when it is current (`Artifact.current`): the writer, the recipe's "done?" and the reader
take the file from here instead of each spelling it.

    file (under $WORKDIR)             written by                              read by
    runs/<method>/latest_check...txt  the training's checkpoint save          the recipe
    runs/<method>/metrics.jsonl       the training (training/metrics.py)      reports/recipe.py, recipe_frontier.py
    runs/<router>/sweep/sweep.json    tools/route_sweep.py                    reports/route_sweep.py; the recipe
    runs/<router>/sweep/sweep.png     tools/route_sweep.py                    reports/route_sweep.py (copied)
    report/eval/text_bytes.json       tools/text_bytes.py                     reports/recipe.py; the recipe
    report/eval/<model>.json          tools/eval_benchmarks.py                reports/benchmarks.py; the recipe
    report/results.json, report.md    tools/scale_report.py                   the recipe; people
    report/generations.json, .md      tools/generate_samples.py               the recipe; people
    slurm/<part>.json                 recipe/array.py, as an ARRAY=1 job ends recipe/array.py (why one is missing)
    timings/<key>.json                recipe/progress.py, as a step ends      recipe/progress.py (time left)

Each is written with megatron_scale/durable.py's atomic_write (the tracker too, by the training's
save). The outputs that are folders or sets of files (datasets, the converted base, upscaled
checkpoints, exports) are done by their completion record instead (recipe/records.py).

Standard library only: importable without site-packages (`python -S`), as the recipe's launcher is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "latest_checkpointed_iteration.txt"
"""A training run's tracker file: its last saved iteration (Megatron-LM's name)."""


# ---- "is it current?", one per file ----------------------------------------------------------------


def _json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or unreadable (then it is not current)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def saved_iterations(run: str | os.PathLike[str]) -> int:
    """Iterations a training run (its --save directory) has saved: 0 before its first checkpoint."""
    try:
        return int((Path(run) / MARKER).read_text().strip())
    except FileNotFoundError:
        return 0


def _trained(path: Path, iters: int) -> bool:
    return saved_iterations(path.parent) >= iters


def _swept(path: Path, settings: Mapping[str, object]) -> bool:
    """sweep.json records every one of `settings` (the run's last checkpoint among them)."""
    got = _json(path)
    recorded = got.get("settings", {}) if isinstance(got, dict) else None
    return isinstance(recorded, dict) and all(recorded.get(k) == v for k, v in settings.items())


def _counted(path: Path, tokenizer: str, sets: Mapping[str, str]) -> bool:
    """text_bytes.json counts these sets ({name: prefix}) with this tokenizer."""
    got = _json(path)
    try:
        return got["tokenizer"] == tokenizer and {n: r["prefix"] for n, r in got["sets"].items()} == dict(sets)
    except (KeyError, TypeError, AttributeError):
        return False


def _scored(path: Path, checkpoint: str, tasks: Sequence[str], limit: int | None) -> bool:
    """A benchmark JSON scores this checkpoint on these tasks with this --limit."""
    got = _json(path)
    try:
        return (got["checkpoint"], got["limit"], sorted(got["results"])) == (checkpoint, limit, sorted(tasks))
    except (KeyError, TypeError):
        return False


def _newer(path: Path, inputs: Sequence[Path]) -> bool:
    try:
        mtime = path.stat().st_mtime
        return all(mtime >= p.stat().st_mtime for p in inputs)
    except OSError:
        return False


def _reported(path: Path, runs: Sequence[str], failed: Mapping[str, str], inputs: Sequence[Path]) -> bool:
    """results.json reports exactly `runs` and `failed` and is newer than each input."""
    got = _json(path)
    if not isinstance(got, dict) or not _newer(path, inputs):
        return False
    return [r.get("method") for r in got.get("runs", [])] == list(runs) and got.get("failed", {}) == dict(failed)


def _generated(path: Path, models: Mapping[str, Path]) -> bool:
    """generations.json holds these models ({name: HF folder}), and is newer than each one's config.json."""
    got = _json(path)
    return (isinstance(got, dict) and list(got) == list(models)
            and _newer(path, [Path(f) / "config.json" for f in models.values()]))


# ---- the files --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One file a step writes and a later step or report reads."""

    where: str
    """Its path relative to $WORKDIR, with {fields} that `path()` fills in."""
    writer: str
    """What writes it."""
    readers: str
    """What reads it."""
    holds: str
    """What in it the readers rely on."""
    current: Callable[..., bool] | None = None
    """current(path, ...): whether the file answers for what a step would write now; None for a
    file no step skips by."""

    def path(self, workdir: str | os.PathLike[str], **fields: str) -> Path:
        return Path(workdir) / self.where.format(**fields)

    def folder(self, workdir: str | os.PathLike[str]) -> Path:
        """The folder holding every file of this kind (for a `where` whose folder has no {fields})."""
        return Path(workdir) / Path(self.where).parent

    @property
    def name(self) -> str:
        """Its file name: what a writer given only the folder (a tool's --out) writes there."""
        return Path(self.where).name


TRACKER = Artifact(
    where=f"runs/{{method}}/{MARKER}", writer="the training's checkpoint save (Megatron-LM's marker)",
    readers="the recipe: a run to resume (--load of its own save directory) or done",
    holds="the last saved iteration, as text", current=_trained)
"""current(path, iters): the run has saved `iters` iterations."""

METRICS = Artifact(
    where="runs/{method}/metrics.jsonl",
    writer="the training entry (training/metrics.py MetricsLog), one line per record",
    readers="run_metrics.py (evaluations, start_record), for reports/recipe.py, reports/recipe_frontier.py, "
            "evaluation/splice.py",
    holds='lines {"kind": "eval/<set>", "iteration", "lm_loss", "ppl"[, "preserve_fraction"]}; '
          '"train" and "resume" lines')

SWEEP = Artifact(
    where="runs/{method}/sweep/sweep.json", writer="tools/route_sweep.py (route_eval/report.py write_json)",
    readers="reports/route_sweep.py (load_sweep), reports/recipe_frontier.py; the recipe",
    holds='"settings" (what was swept: the checkpoint, samples, units, calibration), "old", "new", "tokens", '
          '"heads", "statistics" with each one\'s "calibration"', current=_swept)
"""current(path, settings): its "settings" hold every item of `settings`."""

SWEEP_PLOT = Artifact(
    where="runs/{method}/sweep/sweep.png", writer="tools/route_sweep.py (route_eval/report.py plot), beside sweep.json",
    readers="reports/route_sweep.py (route_section: copied into the report)", holds="the sweep's plot (PNG)")

TEXT_BYTES = Artifact(
    where="report/eval/text_bytes.json", writer="tools/text_bytes.py",
    readers="reports/recipe.py (text_sizes: bits per byte); the recipe",
    holds='"tokenizer", "sets": {name: {"prefix", "documents", "tokens", "bytes", "chars"}}', current=_counted)
"""current(path, tokenizer, sets): these sets, by prefix, counted with this tokenizer."""

BENCHMARK = Artifact(
    where="report/eval/{model}.json", writer="tools/eval_benchmarks.py (evaluation/benchmarks.py write)",
    readers="reports/benchmarks.py (load_scores); the recipe",
    holds='"checkpoint", "limit", "results": {task: {acc[, acc_norm], *_stderr, n, per_item}}', current=_scored)
"""current(path, checkpoint, tasks, limit): that checkpoint scored on those tasks at that limit."""

RESULTS = Artifact(
    where="report/results.json", writer="tools/scale_report.py (reports/recipe.py write_report), beside report.md",
    readers="the recipe (a second submission, a requeue); people",
    holds='"base", "runs" (each with its "method"), "checks", "table"[, "failed", "route_sweep", "benchmarks"]',
    current=_reported)
"""current(path, runs, failed, inputs): these runs and failures, newer than every input."""

REPORT = Artifact(
    where="report/report.md", writer="tools/scale_report.py (reports/recipe.py write_report), beside results.json",
    readers="people; the recipe names it once the report is current", holds="the report's tables (Markdown)")

GENERATIONS = Artifact(
    where="report/generations.json", writer="tools/generate_samples.py (reports/samples.py), beside generations.md",
    readers="the recipe; people", holds="{model: {lang: [{prompt, text}]}}, the models in order", current=_generated)
"""current(path, models): these models in this order, newer than each one's config.json."""

GENERATIONS_MD = Artifact(
    where="report/generations.md", writer="tools/generate_samples.py (reports/samples.py), beside generations.json",
    readers="people; the recipe names it once the generations are current", holds="the continuations as tables")

# the launcher's own bookkeeping, which no step skips by
PART_RECORD = Artifact(where="slurm/{part}.json", writer="recipe/array.py record_exit, as an ARRAY=1 job ends",
                       readers="recipe/array.py why_missing (the report's reason a method is missing)",
                       holds='"part", "state" (finished | failed | stopped), "exit_status", "step", "job", '
                             '"restart", "log", "log_tail"')
TIMING = Artifact(where="timings/{key}.json", writer="recipe/progress.py Timings.ended, as a step that ran ends done",
                  readers="recipe/progress.py (the estimate of the time left)", holds='"seconds", "work", "kind"')

# the biography benchmark's outputs, relative to its --out (tools/biography_benchmark.py; no recipe step)
BIO_RESULTS = Artifact(where="results.json", writer="tools/biography_benchmark.py (reports/bio.py write_all)",
                       readers="people (the frontier reads the stage files: reports/bio_frontier.py)",
                       holds='"settings", "methods" (each method\'s curves and final scores)')
BIO_TABLE = Artifact(where="table.md", writer="tools/biography_benchmark.py (reports/bio.py write_all)",
                     readers="people", holds="the benchmark's tables (Markdown)")
BIO_PLOT = Artifact(where="plot.png", writer="tools/biography_benchmark.py (reports/bio.py write_all)",
                    readers="people", holds="both tasks' first-token accuracy along training")

ARTIFACTS: tuple[Artifact, ...] = (TRACKER, METRICS, SWEEP, SWEEP_PLOT, TEXT_BYTES, BENCHMARK, RESULTS, REPORT,
                                   GENERATIONS, GENERATIONS_MD, PART_RECORD, TIMING)

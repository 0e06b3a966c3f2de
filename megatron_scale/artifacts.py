"""The files the recipe's steps pass on, each described once, and the one atomic write.

A step of the recipe (megatron_scale/recipe/steps.py) writes files that a later step or a report
reads, and a requeued or repeated job skips a step whose output is current. For each such file
this module says where it lives (relative to $WORKDIR), who writes it, who reads it, what in it
the readers rely on, and when it is current (`Artifact.current`): the writer, the recipe's "done?"
and the reader meet here instead of each restating the file.

    file (under $WORKDIR)             written by                              read by
    runs/<method>/latest_check...txt  the training's checkpoint save          the recipe
    runs/<method>/metrics.jsonl       the training (training/metrics.py)      reports/recipe.py, recipe_frontier.py
    runs/<router>/sweep/sweep.json    tools/route_sweep.py                    reports/route_sweep.py; the recipe
    report/eval/text_bytes.json       tools/text_bytes.py                     reports/recipe.py; the recipe
    report/eval/<model>.json          tools/eval_benchmarks.py                reports/benchmarks.py; the recipe
    report/results.json               tools/scale_report.py                   the recipe; people
    report/generations.json           tools/generate_samples.py               the recipe; people
    slurm/<part>.json                 recipe/array.py, as an ARRAY=1 job ends recipe/array.py (why one is missing)
    timings/<key>.json                recipe/progress.py, as a step ends      recipe/progress.py (time left)

Each of these files (the tracker too, by the training's save), and every other JSON, Markdown
and plot the package writes, is written with `atomic_write`: a reader sees the old file or the
whole new one, never a part, and once it returns the file survives a crash of the machine. Not
so: the appended logs, whose every line is a record (metrics.jsonl, slurm/submissions.jsonl), and
what is built as a folder or a pair of files under a `.partial` name and renamed when complete
(checkpoints, Hugging Face exports, indexed datasets): those are moved into place with
`durable_replace` (their files and folders fsynced, the rename, the parent folder fsynced), and a
recipe step's output is counted as done only with its completion record (recipe/records.py).

What durability costs (tools/bench_atomic_write.py, the 2-core machine's disk, measured under
load): a 1 KiB file 3.1 ms instead of 0.07 ms (the file's fsync 1.4 ms, the folder's 1.6 ms); a
1 GiB file 0.75 to 0.85 s instead of 0.52 s, the time its data takes to reach the disk.

Standard library only: importable without site-packages (`python -S`), as the recipe's launcher is.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "latest_checkpointed_iteration.txt"
"""A training run's tracker file: its last saved iteration (Megatron-LM's name)."""


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` by `data` (str: UTF-8), atomically and durably: the data goes to a temporary
    file in the same folder, is flushed and fsynced, renamed over `path`, and the folder is fsynced
    so that the rename itself survives a crash. The folder is made if missing; the file gets the
    usual permissions (0666 less the umask), as open() would give it."""
    target = os.fspath(path)
    folder = os.path.dirname(target) or "."
    os.makedirs(folder, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = f"{target}.{os.getpid()}-{secrets.token_hex(4)}.partial"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig: Any) -> None:
    """A matplotlib figure written with `atomic_write`, in the format its file name says (.png)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    atomic_write(path, buf.getvalue())


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make the entries of `folder` (a rename into it) durable. A file system that cannot fsync a
    folder (EINVAL, ENOTSUP: some network and FUSE mounts) orders its metadata itself."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Make one file's data durable (opened read-only: fsync needs no write access on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str], files: Callable[[str], bool] = lambda _name: True) -> None:
    """Make a folder built in place durable: every file under `root` that `files(name)` accepts,
    then every folder, deepest first (their entries), `root` last. Links are not followed."""
    folders = []
    for here, _dirs, names in os.walk(root):
        folders.append(here)
        for name in names:
            path = os.path.join(here, name)
            if files(name) and not os.path.islink(path):
                fsync_file(path)
    for folder in reversed(folders):
        fsync_dir(folder)


def durable_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, synced: bool = False) -> None:
    """Move a finished output (a file, or a folder built under a `.partial` name) to `dst`, so
    that after a crash of the machine `dst` is either absent or whole: its data and entries are
    fsynced first (unless `synced`: the caller did, e.g. each rank its own shard files), then it
    is renamed (os.replace: a file replaces a file, a folder an empty folder) and the folder
    holding `dst` fsynced, so the rename itself is on disk when this returns."""
    if not synced:
        if os.path.isdir(src):
            fsync_tree(src)
        else:
            fsync_file(src)
    os.replace(src, dst)
    fsync_dir(os.path.dirname(os.path.abspath(dst)))


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""The OS errors of a full disk, a full quota and a file-size limit."""


def disk_full(error: BaseException, path: str | os.PathLike[str]) -> str | None:
    """Why a write under `path` failed, in one line, when the disk is full; else None. The file
    system of `path` (or of its nearest existing parent) left with under 1 MiB or 0.5 % free counts
    as full, whatever the error says: torch's zip writer and safetensors report a full disk without
    its errno. Failing that, an OSError of FULL_ERRNOS in the error or its causes (a quota, a
    file-size limit) is named."""
    here = Path(path)
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        st = os.statvfs(here)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        if free < max(1 << 20, total // 200):
            return f"{os.strerror(errno.ENOSPC)} ({free} bytes free on the file system of {path})"
    except OSError:
        pass
    return os_error(error, FULL_ERRNOS)


def os_error(error: BaseException, errnos: Sequence[int] | None = None) -> str | None:
    """The first OSError with an errno (of `errnos`, if given) in `error`, its causes and contexts,
    and the per-rank failures torch's CheckpointException holds, as one line: its strerror and
    file name. None if there is none."""
    seen, todo = set(), [error]
    while todo:
        x = todo.pop(0)
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno is not None and (errnos is None or x.errno in errnos):
            return os.strerror(x.errno) + (f" ({x.filename})" if x.filename else "")
        todo += [c for c in (x.__cause__, x.__context__) if c is not None]
        todo += [f for f in getattr(x, "failures", {}).values() if isinstance(f, BaseException)]
    return None


def write_durably(path: str | os.PathLike[str], write: Callable[[Any], object]) -> None:
    """Write a file in place through `write(binary file)` and fsync it before closing: for
    what is built under a `.partial` name and moved into place with `durable_replace`."""
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


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


TRACKER = Artifact(
    where=f"runs/{{method}}/{MARKER}", writer="the training's checkpoint save (Megatron-LM's marker)",
    readers="the recipe: a run to resume (--load of its own save directory) or done",
    holds="the last saved iteration, as text", current=_trained)
"""current(path, iters): the run has saved `iters` iterations."""

METRICS = Artifact(
    where="runs/{method}/metrics.jsonl",
    writer="the training entry (training/metrics.py MetricsLog), one line per record",
    readers="reports/recipe.py (evaluations), reports/recipe_frontier.py",
    holds='lines {"kind": "eval/<set>", "iteration", "lm_loss", "ppl"[, "preserve_fraction"]}; '
          '"train" and "resume" lines')

SWEEP = Artifact(
    where="runs/{method}/sweep/sweep.json", writer="tools/route_sweep.py (route_eval/report.py write_json)",
    readers="reports/route_sweep.py (load_sweep), reports/recipe_frontier.py; the recipe",
    holds='"settings" (what was swept: the checkpoint, samples, units, calibration), "old", "new", "tokens", '
          '"heads", "statistics" with each one\'s "calibration"', current=_swept)
"""current(path, settings): its "settings" hold every item of `settings`."""

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

GENERATIONS = Artifact(
    where="report/generations.json", writer="tools/generate_samples.py (reports/samples.py), beside generations.md",
    readers="the recipe; people", holds="{model: {lang: [{prompt, text}]}}, the models in order", current=_generated)
"""current(path, models): these models in this order, newer than each one's config.json."""

# the launcher's own bookkeeping, which no step skips by
PART_RECORD = Artifact(where="slurm/{part}.json", writer="recipe/array.py record_exit, as an ARRAY=1 job ends",
                       readers="recipe/array.py why_missing (the report's reason a method is missing)",
                       holds='"part", "state" (finished | failed | stopped), "exit_status", "step", "job", '
                             '"restart", "log", "log_tail"')
TIMING = Artifact(where="timings/{key}.json", writer="recipe/progress.py Timings.ended, as a step that ran ends done",
                  readers="recipe/progress.py (the estimate of the time left)", holds='"seconds", "work"')

ARTIFACTS: tuple[Artifact, ...] = (TRACKER, METRICS, SWEEP, TEXT_BYTES, BENCHMARK, RESULTS, GENERATIONS, PART_RECORD,
                                   TIMING)

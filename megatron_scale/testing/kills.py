"""Kills at any moment: SIGKILL a training launch at a seeded fault point, resume from whatever is
on disk (again and again if a resume is killed too), and hold the result to the uninterrupted run.

A trial, for one method:
  1. the uninterrupted reference run (once per method, shared by its trials) saves every
     SAVE_EVERY iterations and counts how often each rank reaches each fault point
     (megatron_scale/testing/faults.py, MEGATRON_SCALE_FAULT_COUNT);
  2. a seeded draw picks (point, k, rank) with k within those counts; the launch runs with
     MEGATRON_SCALE_FAULT=point:k@rank and the firing rank SIGKILLs torchrun's agent, every worker
     and itself, logging where it was (MEGATRON_SCALE_FAULT_LOG);
  3. the next launch resumes as a requeued job does (megatron_scale/recipe/steps.py): --load the
     run directory if its marker exists, else the run's own start; with some probability it is
     armed too, at a point drawn the same way (its k may lie past what it reaches: then it finishes).
Checked for every trial: every loss any launch logged equals the reference's at that iteration
(==, bitwise); the last launch finishes every iteration; every resume names the checkpoint it
loaded (its metrics "resume" record), which is the one the marker named when it started, and whose
files are those of the reference's checkpoint at that iteration, item for item (a half-written or
different checkpoint cannot pass: `differences`); the run's final checkpoint is the reference's.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

from megatron_scale.testing.runs import command, make_dataset, records

ITERS, SAVE_EVERY = 6, 2
MARKER = "latest_checkpointed_iteration.txt"
# Where a first launch dies; a resumed one may also die while loading its checkpoint.
POINTS = ("forward", "optimizer-step", "save-data", "save-before-rename", "save-before-marker")
RESUME_POINTS = ("load", *POINTS)
RANK0_ONLY = ("save-before-rename", "save-before-marker")  # rank 0 renames and writes the marker
MAX_KILLS = 5  # per trial: the first launch's, and at most MAX_KILLS - 1 resumes


@dataclass(frozen=True)
class Setup:
    """How one method's run is launched: ranks, flags beside --method, whether it starts from the base."""

    method: str
    nproc: int
    flags: tuple[str, ...] = ()
    from_base: bool = True

    @property
    def layout(self) -> str:
        f = self.flags
        tp = int(f[f.index("--tensor-model-parallel-size") + 1]) if "--tensor-model-parallel-size" in f else 1
        parts = [f"TP={tp}", f"DP={self.nproc // tp}"]
        parts += ["SP"] * ("--sequence-parallel" in f) + ["distributed optimizer"] * ("--use-distributed-optimizer" in f)
        return ", ".join(parts)


TP2 = ("--tensor-model-parallel-size", "2")
SETUPS = {s.method: s for s in (
    Setup("full", 1, from_base=False),  # from random init; its reference run's last checkpoint is the base
    Setup("freeze", 1, ("--freeze-layers", "2")),
    Setup("scale-preserve", 2, (*TP2, "--sequence-parallel")),
    Setup("scale-adapt", 2, ("--use-distributed-optimizer",)),
    Setup("scale-route", 1),
    Setup("llama-pro", 2, ("--llama-pro-blocks", "2", "--use-distributed-optimizer")),
    Setup("lora", 2, TP2),
)}
METHODS = tuple(SETUPS)


@dataclass
class Work:
    root: Path
    data: dict[str, str] = field(default_factory=dict)
    refs: dict[str, Reference] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return str(self.refs["full"].save / f"iter_{ITERS:07d}")


@dataclass
class Reference:
    save: Path
    losses: dict[int, float]
    counts: dict[int, dict[str, int]]  # rank -> point -> hits


@dataclass
class Launch:
    returncode: int
    losses: dict[int, float]
    resumed_from: str | None
    marker_before: int | None
    landing: dict[str, Any] | None
    seconds: float


@dataclass
class Trial:
    method: str
    launches: list[Launch]
    kills: list[dict[str, Any]]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEGATRON_SCALE_FAULT")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _marker(save: Path) -> int | None:
    m = save / MARKER
    return int(m.read_text()) if m.exists() else None


def _args(work: Work, setup: Setup, save: Path) -> list[str]:
    """The run's flags; --load as a requeued job picks it: the run directory once it has a
    checkpoint, else the start (the base, or nothing for a run from random init)."""
    args = ["--method", setup.method, *setup.flags, "--train-iters", str(ITERS), "--data-path", work.data["train"],
            "--save", str(save), "--save-interval", str(SAVE_EVERY)]
    if _marker(save) is not None:
        return [*args, "--load", str(save)]
    if setup.from_base:
        return [*args, "--load", work.base]
    return args


def _wait_gone(pids: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while psutil.pid_exists(pid):
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            assert time.monotonic() < deadline, f"pid {pid} still alive {timeout} s after the kill"
            time.sleep(0.05)


def launch(work: Work, setup: Setup, save: Path, tag: str, fault: str | None = None,
           count_dir: Path | None = None, timeout: float = 600) -> Launch:
    """One torchrun launch of the run in `save`; armed with `fault` (point:k@rank) if given."""
    metrics, log = save.parent / f"{tag}.jsonl", save.parent / f"{tag}.fault.jsonl"
    extra = {"MEGATRON_SCALE_FAULT_LOG": str(log)}
    if fault:
        extra["MEGATRON_SCALE_FAULT"] = fault
    if count_dir:
        extra["MEGATRON_SCALE_FAULT_COUNT"] = str(count_dir)
    marker = _marker(save)
    args = _args(work, setup, save)
    start = time.monotonic()
    proc = subprocess.Popen([*command(setup.nproc, *args, "--metrics-file", str(metrics))], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env(extra), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
            p.kill()
        raise AssertionError(f"{tag}: no end within {timeout} s") from None
    seconds = time.monotonic() - start
    landing = json.loads(log.read_text().splitlines()[-1]) if log.exists() else None
    if landing is not None:
        _wait_gone(landing["victims"])  # nothing of the launch may still write
        assert proc.returncode == -9, f"{tag}: the killed launch exited {proc.returncode}\n{out[-3000:]}"
    else:
        assert proc.returncode == 0, f"{tag}: exit {proc.returncode}\n{out[-5000:]}"
    resumes = records(metrics, "resume")
    return Launch(returncode=proc.returncode, losses={r["iteration"]: r["lm_loss"] for r in records(metrics)},
                  resumed_from=resumes[0]["checkpoint"] if resumes else None, marker_before=marker,
                  landing=landing, seconds=seconds)


def prepare(root: Path) -> Work:
    work = Work(root=root)
    work.data["train"] = make_dataset(root / "ko", seed=1)
    return work


def reference(work: Work, method: str) -> Reference:
    """The uninterrupted run (once per method), counting every fault point's hits per rank."""
    if method in work.refs:
        return work.refs[method]
    if SETUPS[method].from_base:
        reference(work, "full")  # the base
    save = work.root / f"ref-{method}" / "run"
    counts = work.root / f"ref-{method}" / "counts"
    got = launch(work, SETUPS[method], save, "ref", count_dir=counts)
    assert sorted(got.losses) == list(range(1, ITERS + 1)), got.losses
    per_rank = {int(p.stem.removeprefix("rank")): json.loads(p.read_text()) for p in counts.glob("rank*.json")}
    assert sorted(per_rank) == list(range(SETUPS[method].nproc)), per_rank
    work.refs[method] = Reference(save=save, losses=got.losses, counts=per_rank)
    return work.refs[method]


def draw(rng: random.Random, ref: Reference, point: str, remaining: float = 1.0) -> str:
    """A fault spec for `point`: a rank that reaches it and a hit k among that rank's hits in the
    `remaining` share of the run (a resume's later start). `load` happens once, on every rank."""
    if point == "load":
        return f"load:1@{rng.randrange(len(ref.counts))}"
    ranks = [r for r, c in sorted(ref.counts.items()) if c.get(point, 0) > 0 and (r == 0 or point not in RANK0_ONLY)]
    assert ranks, (point, ref.counts)
    rank = rng.choice(ranks)
    return f"{point}:{rng.randint(1, max(1, int(ref.counts[rank][point] * remaining)))}@{rank}"


def _same(x: Any, y: Any) -> bool:
    """Deep equality of decoded checkpoint objects: tensors and arrays bitwise, with their dtypes."""
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same, x, y))
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)
    return type(x) is type(y) and x == y


def _decode(raw: bytes) -> Any:
    # our own files, read back weights_only: numpy's RNG state is the one non-tensor type in them
    with torch.serialization.safe_globals([np.core.multiarray._reconstruct, np.ndarray, np.dtype, np.dtypes.UInt32DType]):
        return torch.load(io.BytesIO(raw), weights_only=True)


def differences(mine: Path, theirs: Path) -> list[str]:
    """What differs between two torch_dist checkpoint directories: the file names, metadata.json,
    and every item torch's .metadata lists (tensors byte for byte; pickled objects - common state,
    RNG - decoded and compared, since pickling records which equal strings were one object).
    .metadata itself also records the directory it was written to and a random save id."""
    names = [sorted(p.name for p in d.iterdir()) for d in (mine, theirs)]
    if names[0] != names[1]:
        return [f"files {names[0]} != {names[1]}"]
    out = [] if (mine / "metadata.json").read_bytes() == (theirs / "metadata.json").read_bytes() else ["metadata.json"]
    metas = [FileSystemReader(str(d)).read_metadata() for d in (mine, theirs)]
    if metas[0].storage_data.keys() != metas[1].storage_data.keys():
        return [*out, "the items .metadata lists"]
    for key, a in metas[0].storage_data.items():
        b = metas[1].storage_data[key]
        x, y = ((d / s.relative_path).read_bytes()[s.offset:s.offset + s.length] for d, s in ((mine, a), (theirs, b)))
        if x != y and not (isinstance(metas[0].state_dict_metadata[key.fqn], BytesStorageMetadata)
                           and _same(_decode(x), _decode(y))):
            out.append(key.fqn)
    return list(dict.fromkeys(out))


def on_disk(save: Path) -> str:
    """What a kill left in the run directory, beside the committed checkpoints."""
    marker = _marker(save) or 0
    partial = sorted(p.name for p in save.glob("iter_*.partial")) if save.exists() else []
    beyond = sorted(p.name for p in save.glob("iter_???????") if int(p.name[5:]) > marker) if save.exists() else []
    parts = ([f"{', '.join(partial)} (partial)"] * bool(partial)
             + [f"{', '.join(beyond)} (complete, unmarked)"] * bool(beyond))
    return "; ".join(parts) or "nothing uncommitted"


def run_trial(work: Work, index: int, method: str, first: str, rng: random.Random, resume_kill_p: float,
              max_kills: int = MAX_KILLS) -> Trial:
    """One trial: the first launch armed at `first`; each resume armed with probability `resume_kill_p`
    while the trial has had fewer than `max_kills` kills. Asserts everything the module docstring lists."""
    ref, setup = reference(work, method), SETUPS[method]
    save = work.root / f"trial{index:03d}-{method}" / "run"
    save.parent.mkdir(parents=True)
    launches: list[Launch] = []
    kills: list[dict[str, Any]] = []
    fault: str | None = first
    while True:
        n = len(launches)
        got = launch(work, setup, save, f"launch{n}", fault=fault)
        launches.append(got)
        where = f"trial {index} ({method}) launch {n} [{fault}]"
        for it, loss in got.losses.items():
            assert loss == ref.losses[it], f"{where}: iteration {it} loss {loss!r} != uninterrupted {ref.losses[it]!r}"
        if got.marker_before is None:
            assert got.resumed_from is None, where
        else:  # resumed: from the checkpoint the marker named, the same as the reference's
            loaded = Path(got.resumed_from or "")
            expected = save / f"iter_{got.marker_before:07d}"
            assert loaded == expected, f"{where}: loaded {loaded}, the marker named {expected}"
            differ = differences(loaded, ref.save / loaded.name)
            assert not differ, f"{where}: {loaded} differs from the uninterrupted run's {loaded.name}: {differ}"
        if got.landing is None:
            break
        done = max(got.losses, default=(got.marker_before or 0))
        kills.append({**got.landing, "launch": n, "method": method, "iteration": done,
                      "left": on_disk(save), "marker": _marker(save)})
        assert len(kills) <= max_kills, f"{where}: killed {len(kills)} times, more than armed"
        fault, resumes_at = None, _marker(save) or 0
        if len(kills) < max_kills and rng.random() < resume_kill_p:
            point = rng.choice(RESUME_POINTS if resumes_at else POINTS)
            fault = draw(rng, ref, point, (ITERS - resumes_at) / ITERS)
    last = launches[-1]
    assert max(last.losses) == ITERS, f"trial {index}: the last launch ended at {max(last.losses)}"
    final = f"iter_{ITERS:07d}"
    assert _marker(save) == ITERS
    differ = differences(save / final, ref.save / final)
    assert not differ, f"trial {index}: the final checkpoint differs from the uninterrupted run's: {differ}"
    assert not list(save.glob("iter_*.partial")), f"trial {index}: a partial checkpoint was left behind"
    return Trial(method=method, launches=launches, kills=kills)


def plan_trials(trials: int, seed: int, methods: tuple[str, ...] = METHODS) -> list[tuple[str, str]]:
    """(method, first point) per trial: methods rotate; the first points are seeded shuffles of
    POINTS, so every point is drawn once per len(POINTS) trials."""
    rng = random.Random(seed)
    points: list[str] = []
    while len(points) < trials:
        batch = list(POINTS)
        rng.shuffle(batch)
        points += batch
    return [(methods[i % len(methods)], points[i]) for i in range(trials)]


def run_trials(root: Path, trials: int, seed: int, resume_kill_p: float = 0.3, max_kills: int = MAX_KILLS,
               methods: tuple[str, ...] = METHODS, progress: Any = None) -> list[Trial]:
    work = prepare(root)
    out = []
    for i, (method, point) in enumerate(plan_trials(trials, seed, methods)):
        rng = random.Random(f"{seed}-{i}")
        first = draw(rng, reference(work, method), point)
        out.append(run_trial(work, i, method, first, rng, resume_kill_p, max_kills))
        if progress:
            progress(out[-1])
    return out


def table(trials: list[Trial]) -> str:
    """Markdown: kills per point (and what each left on disk), resumes per loaded checkpoint."""
    kills = [k for t in trials for k in t.kills]
    by_point = Counter(k["point"] for k in kills)
    first = Counter(k["point"] for k in kills if k["launch"] == 0)
    lines = ["| kill point | kills | of which in a resumed launch |", "|---|---|---|"]
    for p in RESUME_POINTS:
        lines.append(f"| {p} | {by_point[p]} | {by_point[p] - first[p]} |")
    lines.append(f"| total | {len(kills)} | {len(kills) - sum(first.values())} |")
    left = Counter(" + ".join(w for w in ("partial", "complete, unmarked") if f"({w})" in k["left"]) or k["left"]
                   for k in kills)
    lines += ["", "| left on disk by the kill | kills |", "|---|---|"] + [f"| {w} | {n} |" for w, n in sorted(left.items())]
    starts = Counter(f"resumed from iter_{L.marker_before:07d}" if L.marker_before is not None
                     else "started over (no checkpoint yet)" for t in trials for L in t.launches[1:])
    lines += ["", "| a later launch | launches |", "|---|---|"] + [f"| {w} | {n} |" for w, n in sorted(starts.items())]
    methods = Counter(t.method for t in trials)
    lines += ["", "| method | layout | trials | kills |", "|---|---|---|---|"]
    lines += [f"| {m} | {SETUPS[m].layout} | {methods[m]} | {sum(len(t.kills) for t in trials if t.method == m)} |"
              for m in METHODS if methods[m]]
    return "\n".join(lines)

#!/usr/bin/env python3
"""Kill trials over the whole recipe: SIGKILL `examples/scale_korean.sh` (the launcher and every
process under it, as a lost node or an OOM kill does) at a random moment of a random step, run
it again as a requeued job would, and check that the rerun finishes with a report byte-identical
to an uninterrupted run's, timing lines aside. Outside CI: its reference run alone is the whole
tiny recipe (minutes); CI covers the parts (tests/recipe/test_records.py, tests/data/test_index_cache.py,
a seeded training kill in tests/training/test_kills.py).

    python tools/recipe_kill_trials.py --trials 50 --seed 0 --workdir runs/recipe-kills --table table.md

The recipe is the tiny one (examples/configs/tiny-cpu.env, cut down by TINY below: a 4-layer
base pre-trained 4 iterations from scratch, SCALE-Route upscaled and trained 4 iterations at
TP=2 x PP=2 on 4 ranks with a save every 2, its router swept, a benchmark, the report, the
Hugging Face export and the greedy samples). First one uninterrupted reference run, paused at
each step's header (SIGSTOP) while its $WORKDIR is copied: the state a requeued job meets before
that step. Trial i then takes step k (the steps in turn from a seeded start), copies the copy made
before step k to the trial's $WORKDIR, starts the recipe there, and once the header of step k is
printed waits a moment drawn uniformly from [0, that step's duration in the reference run) and
SIGKILLs the process group. Where the kill landed (the step whose header came last, and whether
that step's command had started) is recorded. (Every run uses the same $WORKDIR path, so the paths the files name agree.) Then the recipe runs again to its end, and its
report/report.md, report/results.json and report/generations.md must equal the reference's once
paths are written as $WORKDIR and the lines that time things (TIMING) are dropped.

`--save-faults POINT:K@RANK ...` adds one trial per spec that kills the training step (TP=2 x PP=2)
inside a save: the killed run is armed with MEGATRON_SCALE_FAULT (megatron_scale/testing/faults.py),
so the rank that reaches the point the K-th time SIGKILLs torchrun's agent, every rank and itself
(e.g. `save-data:1@3`: between two tensors of rank 3's shard file of the first save); the recipe
stops on the failed step, and the rerun must finish identical as above.

Every trial is a line of the table (--table, Markdown): trial, step, moment (s after the step's
header), where the kill landed, outcome (identical | DIFFERS: first differing line | RERUN FAILED
rc: last line of its log), seconds. Needs Linux; runs at whatever nice it was started with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = {
    "METHODS": "scale-route", "TP": "2", "PP": "2", "NPROC": "4", "BASE_ITERS": "4", "TRAIN_ITERS": "4",
    "WARMUP_ITERS": "1", "SAVE_INTERVAL": "2", "EVAL_ITERS": "1", "EVAL_INTERVAL": "2", "LOG_INTERVAL": "1",
    "MICRO_BATCH": "2", "GLOBAL_BATCH": "4", "SEQ_LENGTH": "64", "ROUTE_SWEEP_SAMPLES": "2", "EXPORT": "1",
    "SAMPLES": "1", "BENCHMARKS": "arc_easy", "BENCHMARK_LIMIT": "2", "OMP_NUM_THREADS": "1",
}
HEADER = re.compile(r"^==> \[[0-9:]+\] step (\d+): (.*)$")
TIMING = re.compile(r"\b\d+(\.\d+)? ?(s|ms|min|h)\b|tokens/s|s/it|seconds|so far|time left|took", re.I)
"""Lines that time things (wall times differ between two equal runs)."""
REPORT = ("report/report.md", "report/results.json", "report/generations.md")


def _env(work: Path, port: int) -> dict[str, str]:
    return {**os.environ, **TINY, "WORKDIR": str(work), "PYTHON": sys.executable, "MASTER_PORT": str(port),
            "SCALE_REPO": str(REPO), "PYTHONUNBUFFERED": "1"}


def _start(work: Path, log: Path, port: int, extra: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(["bash", "examples/scale_korean.sh", "examples/configs/tiny-cpu.env"], cwd=REPO,
                            env={**_env(work, port), **(extra or {})}, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _lines(log: Path) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _headers(log: Path) -> list[int]:
    return [int(m.group(1)) for ln in _lines(log) if (m := HEADER.match(ln))]


def kill_tree(p: subprocess.Popen) -> None:
    """SIGKILL the run and every process under it. torchrun starts each rank in a session of its
    own (start_new_session), so the process group alone would leave the ranks running on: the
    tree is frozen (SIGSTOP, so nothing forks meanwhile), read again, then killed."""
    import psutil

    procs: dict[int, psutil.Process] = {}
    for _ in range(3):
        try:
            found = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for q in found:
            if q.pid not in procs:
                procs[q.pid] = q
                with contextlib.suppress(psutil.Error):
                    q.send_signal(signal.SIGSTOP)
    for q in procs.values():
        with contextlib.suppress(psutil.Error):
            q.kill()
    p.wait()
    psutil.wait_procs(list(procs.values()), timeout=30)


def reference(root: Path, port: int) -> dict[str, object]:
    """The uninterrupted run, $WORKDIR copied before each step; each step's duration."""
    work, log = root / "work", root / "ref" / "log.txt"
    shutil.rmtree(root / "ref", ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    (root / "ref").mkdir(parents=True)
    p = _start(work, log, port)
    seen, starts, titles = 0, {}, {}
    while True:
        heads = _headers(log)
        if len(heads) > seen:
            os.killpg(p.pid, signal.SIGSTOP)
            for k in heads[seen:]:
                starts[k] = time.monotonic()
                snap = root / "ref" / f"before-{k}"
                shutil.rmtree(snap, ignore_errors=True)
                if work.exists():
                    shutil.copytree(work, snap, symlinks=True)
                else:
                    snap.mkdir()
            titles.update({int(m.group(1)): m.group(2) for ln in _lines(log) if (m := HEADER.match(ln))})
            seen = len(heads)
            os.killpg(p.pid, signal.SIGCONT)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    if p.returncode != 0:
        raise SystemExit(f"the reference run failed (exit {p.returncode}); see {log}")
    end = time.monotonic()
    order = sorted(starts)
    durations = {k: (starts[order[i + 1]] if i + 1 < len(order) else end) - starts[k] for i, k in enumerate(order)}
    ref = {"steps": {k: {"title": titles[k], "seconds": round(durations[k], 1)} for k in order},
           "report": normalised(work)}
    (root / "ref" / "reference.json").write_text(json.dumps(ref, indent=1))
    shutil.move(work, root / "ref" / "work")
    return ref


def normalised(work: Path) -> dict[str, list[str]]:
    """The report's files, paths as $WORKDIR, timing lines dropped."""
    out = {}
    for name in REPORT:
        f = work / name
        text = f.read_text() if f.is_file() else "(missing)"
        text = text.replace(str(work), "$WORKDIR")
        out[name] = [ln for ln in text.splitlines() if not TIMING.search(ln)]
    return out


def _first_difference(a: dict[str, list[str]], b: dict[str, list[str]]) -> str:
    for name in REPORT:
        for i, (x, y) in enumerate(zip(a[name], b[name])):
            if x != y:
                return f"{name} line {i + 1}: {y[:80]!r} (reference {x[:80]!r})"
        if len(a[name]) != len(b[name]):
            return f"{name}: {len(b[name])} lines (reference {len(a[name])})"
    return ""


def _set_up(root: Path, step: int, i: int) -> tuple[Path, Path]:
    """Trial i's folder (its logs), emptied, and the work folder as the reference found it before `step`."""
    here = root / f"trial-{i:03d}"
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    work = root / "work"  # the reference's path: the paths its files name are this trial's too
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(root / "ref" / f"before-{step}", work, symlinks=True)
    return here, work


def trial(root: Path, ref: dict, step: int, moment: float, port: int, i: int) -> dict[str, object]:
    t0 = time.monotonic()
    here, work = _set_up(root, step, i)
    killed_log = here / "killed.txt"
    p = _start(work, killed_log, port)
    while step not in _headers(killed_log) and p.poll() is None:
        time.sleep(0.05)
    time.sleep(moment)
    landed = "ended before the kill"
    if p.poll() is None:
        kill_tree(p)
        heads = _headers(killed_log)
        last = heads[-1] if heads else 0
        tail = _lines(killed_log)
        after = tail[max(i for i, ln in enumerate(tail) if HEADER.match(ln)) + 1:] if heads else tail
        doing = "skipped" if any(ln.startswith("skipped, done before") for ln in after) else "running"
        landed = f"step {last} ({doing})"
    return {"trial": i, "step": step, "title": ref["steps"][step]["title"], "moment": round(moment, 2),
            "landed": landed, "outcome": _rerun(ref, work, here, port), "seconds": round(time.monotonic() - t0, 1)}


def _rerun(ref: dict, work: Path, here: Path, port: int) -> str:
    """Run the recipe again in `work` to its end, as a requeued job; its report against the reference's."""
    rerun_log = here / "rerun.txt"
    rc = _start(work, rerun_log, port).wait()
    if rc != 0:
        outcome = f"RERUN FAILED {rc}: {(_lines(rerun_log) or ['(no output)'])[-1][:100]}"
    else:
        diff = _first_difference(ref["report"], normalised(work))
        outcome = f"DIFFERS: {diff}" if diff else "identical"
    if outcome == "identical":
        shutil.rmtree(work, ignore_errors=True)  # keep the logs; a failure keeps its work folder
    else:
        shutil.move(work, here / "work")
    return outcome


def training_step(ref: dict) -> int:
    """The step that trains the method (TP=2 x PP=2, a save every 2 iterations)."""
    (step,) = [k for k, v in ref["steps"].items() if str(v["title"]).startswith("continue on Korean")]
    return step


def fault_trial(root: Path, ref: dict, spec: str, port: int, i: int) -> dict[str, object]:
    """A kill at a named point of the training's save (megatron_scale/testing/faults.py,
    MEGATRON_SCALE_FAULT=<point>:<k>@<rank>): the rank that reaches it SIGKILLs torchrun's agent,
    every rank and itself, mid-save at TP=2 x PP=2, and the recipe stops on the failed step. Then
    the recipe runs again to its end, as in `trial`."""
    t0 = time.monotonic()
    step = training_step(ref)
    here, work = _set_up(root, step, i)
    fired = here / "fault.jsonl"
    p = _start(work, here / "killed.txt", port, {"MEGATRON_SCALE_FAULT": spec, "MEGATRON_SCALE_FAULT_LOG": str(fired)})
    try:
        rc = p.wait(timeout=1800)
    except subprocess.TimeoutExpired:
        kill_tree(p)
        rc = p.returncode
    if fired.is_file() and fired.read_text().strip():
        f = json.loads(fired.read_text().splitlines()[0])
        what = ", ".join(f"{k} {v}" for k, v in f.items() if k not in ("point", "k", "rank", "victims"))
        landed = f"{f['point']} #{f['k']} on rank {f['rank']}" + (f" ({what})" if what else "") + f"; recipe exit {rc}"
    else:
        landed = f"the fault did not fire (recipe exit {rc})"
    return {"trial": i, "step": step, "title": ref["steps"][step]["title"], "moment": f"at {spec}",
            "landed": landed, "outcome": _rerun(ref, work, here, port), "seconds": round(time.monotonic() - t0, 1)}


def row(t: dict[str, object]) -> str:
    return (f"| {t['trial']} | {t['step']}: {str(t['title'])[:60]} | {t['moment']} | {t['landed']} | {t['outcome']} "
            f"| {t['seconds']} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, required=True, help="reference and trials go here")
    p.add_argument("--table", type=Path, help="the Markdown table, rewritten after every trial")
    p.add_argument("--port", type=int, default=29731, help="MASTER_PORT of every run")
    p.add_argument("--reuse-reference", action="store_true", help="use the reference already in --workdir")
    p.add_argument("--steps", nargs="*", type=int, default=None, metavar="K",
                   help="kill only in these steps (default: every step, in turn)")
    p.add_argument("--save-faults", nargs="*", default=[], metavar="POINT:K@RANK",
                   help="after the random trials, one trial per spec killing the training's save at that "
                        "fault point (e.g. save-data:1@3)")
    a = p.parse_args(argv)
    root = a.workdir.resolve()
    if a.reuse_reference and (root / "ref" / "reference.json").is_file():
        ref = json.loads((root / "ref" / "reference.json").read_text())
        ref["steps"] = {int(k): v for k, v in ref["steps"].items()}
    else:
        t0 = time.monotonic()
        ref = reference(root, a.port)
        print(f"reference run: {time.monotonic() - t0:.0f} s, steps "
              + ", ".join(f"{k} {v['seconds']} s" for k, v in ref["steps"].items()), flush=True)
    rng = random.Random(a.seed)
    steps = sorted(ref["steps"])
    if a.steps:
        unknown = sorted(set(a.steps) - set(steps))
        if unknown:
            p.error(f"--steps {' '.join(map(str, unknown))}: the recipe has steps {steps[0]} to {steps[-1]}")
        steps = sorted(set(a.steps))
    first = rng.randrange(len(steps))
    head = ["| trial | step killed | moment (s after its header) | where the kill landed | outcome | seconds |",
            "|---|---|---|---|---|---|"]
    rows: list[str] = []
    failed = 0

    def record(t: dict[str, object]) -> None:
        nonlocal failed
        failed += t["outcome"] != "identical"
        rows.append(row(t))
        print(rows[-1], flush=True)
        if a.table:
            a.table.write_text("\n".join([*head, *rows]) + "\n")

    for i in range(a.trials):
        step = steps[(first + i) % len(steps)]
        moment = rng.uniform(0.0, float(ref["steps"][step]["seconds"]))
        record(trial(root, ref, step, moment, a.port, i))
    for j, spec in enumerate(a.save_faults):
        record(fault_trial(root, ref, spec, a.port, a.trials + j))
    print(f"{len(rows)} trials, {len(rows) - failed} identical, {failed} not", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

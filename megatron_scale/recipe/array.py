"""The methods side by side under Slurm (ARRAY=1): one preparation job, one array task per
method, one report job.

    ARRAY=1 bash examples/scale_korean.sh CONFIG [SBATCH FLAGS...]

submits, each job running examples/scale_korean.sh with SCALE_PART set:

    prepare            (SCALE_PART=prepare)  the demo model, the data, the base (pre-trained or converted)
    methods, task i    (SCALE_PART=methods)  METHODS[i]: upscale, train, [route sweep], export, [lm-eval]
                                             --dependency=afterok:<prepare>
    report             (SCALE_PART=report)   the table and plots of the methods that finished, which
                                             did not and why, the generations;
                                             --dependency=afterany:<methods> (after every task, however it ended)

The SBATCH FLAGS go to all three; an `--array=...` among them picks the tasks (resubmit one
method: `--array=2`) and goes to the methods only. The jobs are recorded in
$WORKDIR/slurm/submissions.jsonl, their logs go to $WORKDIR/logs/. Every job ends by recording
how its part ended in $WORKDIR/slurm/<part>.json (`exit`), which the report reads to say why a
method is missing. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from megatron_scale.artifacts import PART_RECORD
from megatron_scale.durable import atomic_write
from megatron_scale.recipe.settings import Settings, SettingsError

PARTS = ("prepare", "methods", "report")
Sbatch = Callable[[list[str]], str]


def part_of(s: Settings, env: Mapping[str, str]) -> str | None:
    """The part this job runs: "prepare", a method, "report", or None (the whole recipe)."""
    part = env.get("SCALE_PART", "")
    if not part:
        return None
    if part not in PARTS:
        raise SettingsError(f"SCALE_PART={part!r} is not one of {', '.join(PARTS)}")
    if part != "methods":
        return part
    task = env.get("SLURM_ARRAY_TASK_ID", "")
    if not task.isdigit() or int(task) >= len(s.methods):
        raise SettingsError(f"SCALE_PART=methods: SLURM_ARRAY_TASK_ID={task!r} names none of METHODS "
                            f"(0 to {len(s.methods) - 1}: {' '.join(s.methods)})")
    return s.methods[int(task)]


def sbatch(args: list[str]) -> str:
    """`sbatch --parsable ARGS`: the job id."""
    r = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SettingsError(f"sbatch {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout.strip().split(";")[0]


def submit(s: Settings, script: str, config: str, flags: Sequence[str], run: Sbatch = sbatch) -> list[str]:
    """Submit prepare -> methods array -> report; returns what to tell the user, one line each."""
    picked, flags = _take_array(list(flags))
    indices = picked or f"0-{len(s.methods) - 1}"
    tasks = _indices(indices, s.methods)
    logs = s.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def job(part: str, output: str, *extra: str) -> str:
        return run([f"--job-name=scale-korean-{part}", f"--output={logs / output}", *extra,
                    f"--export=ALL,SCALE_PART={part}", *flags, script, config])

    prep = job("prepare", "prepare-%j.out")
    methods = job("methods", "methods-%A_%a.out", f"--array={indices}", f"--dependency=afterok:{prep}",
                  "--kill-on-invalid-dep=yes")
    report = job("report", "report-%j.out", f"--dependency=afterany:{methods}", "--kill-on-invalid-dep=no")
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "prepare": prep, "methods": methods, "report": report,
              "tasks": {str(i): s.methods[i] for i in tasks}, "flags": list(flags)}
    (s.workdir / "slurm").mkdir(exist_ok=True)
    with open(s.workdir / "slurm" / "submissions.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return [f"prepare: job {prep}, log {logs}/prepare-{prep}.out",
            *(f"method {s.methods[i]}: task {methods}_{i} (after job {prep} succeeds), log {logs}/methods-{methods}_{i}.out"
              for i in tasks),
            f"report: job {report} (after every task of {methods} ends), log {logs}/report-{report}.out",
            f"watch: squeue -u $USER; tail -f {logs}/*.out"]


def _take_array(flags: list[str]) -> tuple[str, list[str]]:
    """sbatch's array flag (`--array=S`, `--array S`, `-a S`, `-aS`), and the other flags."""
    spec, rest, i = "", [], 0
    while i < len(flags):
        f = flags[i]
        if f in ("--array", "-a"):
            if i + 1 == len(flags):
                raise SettingsError(f"ARRAY=1: sbatch flag {f} without its value")
            spec, i = flags[i + 1], i + 2
            continue
        if f.startswith("--array="):
            spec = f.split("=", 1)[1]
        elif f.startswith("-a") and not f.startswith("--"):
            spec = f[2:]
        else:
            rest.append(f)
        i += 1
    return spec, rest


def _indices(spec: str, methods: Sequence[str]) -> list[int]:
    """The task ids of an `--array=` spec (ranges, lists, steps; `%N` limits are ignored)."""
    out: list[int] = []
    for item in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item)
        if not m:
            raise SettingsError(f"--array={spec}: {item!r} is not N, N-M or N-M:S")
        lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        out += range(lo, hi + 1, step)
    if not out or max(out) >= len(methods):
        raise SettingsError(f"--array={spec}: the tasks are METHODS' indices, "
                            + ", ".join(f"{i} ({m})" for i, m in enumerate(methods)))
    return out


def record_exit(s: Settings, part: str, step: str, rc: int, finished: bool, env: Mapping[str, str]) -> None:
    """How this job's part ended, for the report: $WORKDIR/slurm/<part>.json (atomic)."""
    job = env.get("SLURM_JOB_ID", "")
    task = env.get("SLURM_ARRAY_TASK_ID")
    name = f"{env.get('SLURM_ARRAY_JOB_ID')}_{task}" if task is not None and env.get("SLURM_ARRAY_JOB_ID") else job
    state = "finished" if rc == 0 and finished else ("failed" if rc != 0 else "stopped")
    log = _stdout_of(job) if job else ""
    record = {"part": part, "state": state, "exit_status": rc, "step": step, "job": name or "(no Slurm job)",
              "restart": int(env.get("SLURM_RESTART_COUNT") or 0), "log": log, "log_tail": _tail(log),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write(PART_RECORD.path(s.workdir, part=part), json.dumps(record, indent=1) + "\n")


def why_missing(s: Settings, method: str) -> str:
    """One line: why `method`'s run is not finished, from its task's record."""
    try:
        r = json.loads(PART_RECORD.path(s.workdir, part=method).read_text())
    except (OSError, ValueError):
        try:
            prep = json.loads(PART_RECORD.path(s.workdir, part="prepare").read_text())
        except (OSError, ValueError):
            prep = {}
        if prep.get("state") == "failed":
            return f"never ran: the preparation job {prep['job']} failed in step {prep['step']!r}"
        return ("no record of its task: it never started, or was killed outright (time limit, memory, "
                "node failure); see its log in " + str(s.workdir / "logs"))
    where = f"task {r['job']} (restart {r['restart']})"
    if r["state"] == "failed":
        tail = " | ".join(r.get("log_tail") or [])
        return (f"{where} failed in step {r['step']!r} with exit status {r['exit_status']}"
                + (f"; log {r['log']}: {tail}" if r.get("log") else ""))
    if r["state"] == "stopped":
        return f"{where} stopped in step {r['step']!r} on a signal (requeued or cancelled) and has not finished"
    return f"{where} finished, but its run is incomplete (files removed since?)"


def _stdout_of(job: str) -> str:
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60,
                           check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"\bStdOut=(\S+)", r.stdout)
    return m.group(1) if m else ""


def _tail(log: str, lines: int = 4) -> list[str]:
    """The last lines of a log (where a failed step's error is)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]

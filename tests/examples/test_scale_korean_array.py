"""`ARRAY=1 bash examples/scale_korean.sh` under a real Slurm (tests/examples/slurm_cluster.py: two
emulated nodes on this machine), the tiny recipe cut short (a 4-iteration base, 4 iterations per
method, one rank each): the methods side by side, checked against one sequential job.

One run of everything (the module fixture), checked by the tests below:
- the reference: `sbatch examples/scale_korean.sh` (one job, the methods one after another) into
  a WORKDIR of its own;
- two ARRAY=1 submissions at once into one shared WORKDIR, each a preparation job, an array of
  four tasks (scale-preserve, full, scale-adapt, and lora with a training flag that does not
  exist: a method that fails) and a report job;
- once a `full` task is training, pre-emption's notice to that task (`scancel --signal=TERM`):
  it saves, requeues itself and comes back; the run resumes from its save (in that task, or in
  the other submission's `full` task, which finds the lock of a job that is not running stale).
Every process the jobs launch goes through PYTHON, here a wrapper that logs its arguments, so
the tests count what ran: each shared step exactly once over both submissions.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.examples.slurm_cluster import SlurmCluster, SlurmUnavailable, comparable_metrics, ensure_slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "examples" / "scale_korean.sh")
CONFIG = str(REPO / "examples" / "configs" / "tiny-cpu.env")
# the pre-emption notice goes to `full` once its log shows iteration 1; at ~0.3 s an iteration on an idle
# machine, 4 iterations ended before it arrived (a fresh-clone CI run: no requeue), 16 leave seconds
ITERS = 16
TRAINED = ("scale-preserve", "full", "scale-adapt")
METHODS = (*TRAINED, "lora")
SETTINGS = {
    "PYTHONPATH": str(REPO), "SCALE_CONFIG": CONFIG, "TP": "1", "NPROC": "1", "BASE_ITERS": "4",
    "TRAIN_ITERS": str(ITERS), "WARMUP_ITERS": "1", "SAVE_INTERVAL": str(ITERS), "EVAL_ITERS": "1",
    "EVAL_INTERVAL": str(ITERS), "LOG_INTERVAL": "1", "OMP_NUM_THREADS": "1", "VERIFY_EXPORT": "0",
    "SAMPLES": "0", "LOCK_POLL": "2", "TRAIN_FLAGS_LORA": "--no-such-flag",
}
# one task per job, so the jobs run side by side on the two nodes (the header asks for 8 GPUs)
SHAPE = ("--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--gpus-per-node=0", "--time=00:30:00")
KILLED = TRAINED.index("full")  # the array index of the task stopped and requeued


@dataclass
class Submission:
    said: str
    prepare: str
    methods: str
    report: str

    def task(self, i: int) -> str:
        return f"{self.methods}_{i}"


@dataclass
class Run:
    cluster: SlurmCluster
    reference: Path  # the sequential job's WORKDIR
    reference_state: tuple[str, str]
    work: Path  # the shared WORKDIR of both submissions
    subs: list[Submission]
    states: dict[str, tuple[str, str]]  # job -> (state, exit code) of every job of both submissions
    killed: str  # the task stopped by pre-emption's notice
    killed_end: dict[str, str]  # its `scontrol show job` as it ended
    stopped_at: int  # the iteration it saved
    launches: list[list[str]]  # [job id, argv...] of every process the jobs launched in `work`
    seconds: float

    def log(self, job: str) -> str:
        """A job's log (the submission's --output: $WORKDIR/logs/{prepare,methods,report}-...)."""
        kind = "methods" if "_" in job else "prepare" if any(job == s.prepare for s in self.subs) else "report"
        path = self.work / "logs" / f"{kind}-{job}.out"
        return path.read_text() if path.exists() else ""


def _wrapper(log: Path) -> str:
    """PYTHON for the jobs: logs `job-id argv` of every launch but the recipe's own questions."""
    w = log.with_suffix(".python")
    w.write_text(f"#!/bin/bash\n[ \"$1 $2\" = '-m megatron_scale.recipe' ] || echo \"${{SLURM_JOB_ID:-none}} $*\" >> {log}\n"
                 f"exec {sys.executable} \"$@\"\n")
    w.chmod(0o755)
    return str(w)


def _submit(cluster: SlurmCluster, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(["bash", SCRIPT, CONFIG, *SHAPE], cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**env, **{k: cluster.env[k] for k in ("SLURM_CONF", "PATH")}})


def _parse(said: str) -> Submission:
    ids = {m.group(1): m.group(2) for m in re.finditer(r"^(prepare|report): job (\d+)", said, re.M)}
    tasks = re.findall(r"^method (\S+): task (\d+)_(\d+) ", said, re.M)
    assert [(m, int(i)) for m, _, i in tasks] == [(m, i) for i, m in enumerate(METHODS)], said
    return Submission(said, ids["prepare"], tasks[0][1], ids["report"])


def _until(what: str, ready, timeout: float, why=lambda: "") -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not ready():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"no {what} after {timeout:.0f} s\n{why()}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    try:
        ensure_slurm()
    except SlurmUnavailable as e:
        pytest.skip(f"no Slurm test cluster: {e}")
    root = tmp_path_factory.mktemp("array")
    cluster = SlurmCluster(root / "slurm", nodes=2, cpus=6)
    cluster.start()
    try:
        yield _run(cluster, root)
    finally:
        cluster.stop()


def _run(cluster: SlurmCluster, root: Path) -> Run:
    t0 = time.monotonic()
    ref, work = root / "reference", root / "work"
    count = root / "launches.log"
    ref_env = {**SETTINGS, "WORKDIR": str(ref), "METHODS": " ".join(TRAINED), "EXPORT": "0",
               "PYTHON": _wrapper(root / "reference-launches.log")}
    ref_job = cluster.submit(SCRIPT, *SHAPE, f"--output={root / 'reference.out'}", env=ref_env, cwd=str(REPO))
    env = {**SETTINGS, "ARRAY": "1", "WORKDIR": str(work), "METHODS": " ".join(METHODS), "PYTHON": _wrapper(count)}
    procs = [_submit(cluster, env), _submit(cluster, env)]  # two submissions at once, one WORKDIR
    said = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], said
    subs = [_parse(s) for s in said]
    # every job's last state, seen as it ends: Slurm forgets a finished job after MinJobAge (60 s)
    jobs = [ref_job, *(j for s in subs for j in (s.prepare, *(s.task(i) for i in range(len(METHODS))), s.report))]
    ends: dict[str, dict[str, str]] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for j in set(jobs) - set(ends):
                r = subprocess.run(["scontrol", "show", "job", "-o", j], capture_output=True, text=True, env=cluster.env,
                                   check=False)
                info = dict(re.findall(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", r.stdout))
                if info.get("JobState") not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED"):
                    ends[j] = info
            time.sleep(1.0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    # pre-emption's notice to the `full` task that trains (the other one waits for its lock)
    def training() -> str | None:
        for s in subs:
            path = work / "logs" / f"methods-{s.task(KILLED)}.out"
            if path.exists() and re.search(rf"iteration\s+1/\s*{ITERS} \|", path.read_text()):
                return s.task(KILLED)
        return None

    _until("`full` training", lambda: training() is not None, 1800, cluster.logs)
    killed = training()
    assert killed is not None
    cluster.run("scancel", "--signal=TERM", killed)
    _until("requeue", lambda: cluster.show_job(killed).get("Restarts") == "1"
           and cluster.show_job(killed)["JobState"] == "PENDING", 600, lambda: str(cluster.show_job(killed)))
    # a requeued job is held 121 s (the credential's lifetime); not startable within the second
    requeued = datetime.fromisoformat(cluster.show_job(killed)["SubmitTime"]).timestamp()
    time.sleep(max(0.0, requeued + 2 - time.time()))
    cluster.run("scontrol", "update", f"JobId={killed}", "StartTime=now")

    _until("every job's end", lambda: len(ends) == len(jobs), 1800, lambda: f"{ends}\n{cluster.logs()}")
    done.set()
    log = (work / "logs" / f"methods-{killed}.out").read_text()
    (stopped,) = map(int, re.findall(r"stopping at iteration (\d+) on a signal", log))
    launches = [ln.split() for ln in count.read_text().splitlines()]
    states = {j: (ends[j]["JobState"], ends[j]["ExitCode"]) for j in jobs}
    return Run(cluster, ref, states.pop(ref_job), work, subs, states, killed, ends[killed], stopped, launches,
               time.monotonic() - t0)


def _records(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def _launched(r: Run, *words: str) -> list[str]:
    """The jobs that launched a process whose arguments hold every word."""
    return [job for job, *argv in r.launches if all(w in argv for w in words)]


def test_every_job_ended_as_expected(run: Run) -> None:
    print(f"the whole run took {run.seconds:.0f} s")
    ref = run.reference.parent / "reference.out"
    assert run.reference_state == ("COMPLETED", "0:0"), ref.read_text()[-5000:] if ref.exists() else "no output"
    lora = METHODS.index("lora")
    for s in run.subs:
        for job in (s.prepare, s.report, *(s.task(i) for i in range(len(METHODS)) if i != lora)):
            assert run.states[job] == ("COMPLETED", "0:0"), f"{job} {run.states[job]}\n{run.log(job)[-5000:]}"
        # the failing method fails its own task only (exit status 2: the training's usage error)
        assert run.states[s.task(lora)] == ("FAILED", "2:0"), run.log(s.task(lora))[-3000:]
    assert not list((run.work / "locks").glob("*.lock")), "a job left a lock behind"


def test_shared_steps_ran_once_over_both_submissions(run: Run) -> None:
    """The preparation ran once (one submission prepared, the other waited and skipped), every
    method trained once (full: twice, the second the resumption), exported once."""
    w = run.work
    assert len(_launched(run, "tools/prepare_demo_data.py")) == 1, run.launches
    assert len(_launched(run, "megatron_scale.train", str(w / "data" / "en_train_text_document"))) == 1
    for m in ("scale-preserve", "scale-adapt"):
        assert len(_launched(run, "tools/upscale_checkpoint.py", str(w / "ckpt" / m))) == 1, run.launches
    for m in TRAINED:
        train = _launched(run, "megatron_scale.train", "--method", m, str(w / "data" / "ko_train_text_document"))
        assert len(train) == (2 if m == "full" else 1), (m, run.launches)
        assert len(_launched(run, "tools/convert_megatron_to_hf.py", str(w / "hf" / m))) == 1
    # the failing method: at most one attempt per submission, one after the other
    assert 1 <= len(_launched(run, "megatron_scale.train", "--method", "lora")) <= 2
    # the second report job found the report up to date, unless a failure record changed after the first
    assert 1 <= len(_launched(run, "tools/scale_report.py")) <= 2
    prep_logs = [run.log(s.prepare) for s in run.subs]
    assert sum("waiting: slurm:" in t for t in prep_logs) >= 1, prep_logs[1][-3000:]  # the later one waited
    assert sum("base trained:" in t for t in prep_logs) >= 1


def test_array_metrics_equal_the_sequential_job_bitwise(run: Run) -> None:
    for m in TRAINED:
        got = _records(run.work / "runs" / m / "metrics.jsonl")
        want = _records(run.reference / "runs" / m / "metrics.jsonl")
        resumes = [(r["iteration"], Path(r["checkpoint"]).name) for r in got if r["kind"] == "resume"]
        assert resumes == ([(run.stopped_at, f"iter_{run.stopped_at:07d}")] if m == "full" else []), (m, resumes)
        got = [r for r in got if r["kind"] != "resume"]
        assert comparable_metrics(got, run.work) == comparable_metrics(want, run.reference), m  # floats exactly
    base = comparable_metrics(_records(run.work / "runs" / "base" / "metrics.jsonl"), run.work)
    assert base == comparable_metrics(_records(run.reference / "runs" / "base" / "metrics.jsonl"), run.reference)


def test_the_killed_task_requeued_and_the_run_resumed(run: Run) -> None:
    job = run.killed_end
    assert (job["Restarts"], job["JobState"], job["ExitCode"]) == ("1", "COMPLETED", "0:0"), job
    text = run.log(run.killed)
    first, _, second = text.partition("restart 1\n")
    assert second, text[-4000:]
    assert 1 <= run.stopped_at < ITERS
    assert "scale_korean.sh: requeued job" in first, first[-3000:]
    assert "scale_korean.sh: SIG" not in first, "the batch shell got no signal (the requeue's SIGTERM is ignored)"
    # it released its lock and recorded how it ended before the requeue ended it
    assert "Terminated" not in first, first[-3000:]
    # the requeued task resumed the run itself, or found it done by the other submission's task
    # (which took the lock of the pending job as stale and resumed it)
    resumed = f"resuming from iteration {run.stopped_at} of {ITERS} saved in {run.work / 'runs' / 'full'}"
    other = [s.task(KILLED) for s in run.subs if s.task(KILLED) != run.killed][0]
    by = run.killed if resumed in second else other
    assert resumed in run.log(by), run.log(other)[-4000:]
    print(f"stopped at iteration {run.stopped_at}; resumed by {'the requeued task' if by == run.killed else 'the other submission'}")
    iters = [int(i) for i in re.findall(rf"iteration\s+(\d+)/\s*{ITERS} \|", run.log(by).split(resumed, 1)[1])]
    assert iters[: ITERS - run.stopped_at] == list(range(run.stopped_at + 1, ITERS + 1))


def test_the_report_is_complete_and_names_the_failed_method(run: Run) -> None:
    w = run.work
    results = json.loads((w / "report" / "results.json").read_text())
    assert [r["method"] for r in results["runs"]] == list(TRAINED)
    assert list(results["failed"]) == ["lora"]
    why = results["failed"]["lora"]
    assert re.match(r"task \d+_3 \(restart 0\) failed in step '\d+: continue on Korean with --method lora", why), why
    assert "exit status 2" in why and "unrecognized arguments: --no-such-flag" in why, why
    report = (w / "report" / "report.md").read_text()
    assert "## Methods not in this report" in report and "**lora**" in report
    assert (w / "report" / "perplexity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for m in TRAINED:
        assert json.loads((w / "hf" / m / "config.json").read_text())["architectures"], m
    assert not (w / "hf" / "lora").exists()
    # the report job's log says which method is missing and why
    assert any("not in the report: lora: task" in run.log(s.report) for s in run.subs)

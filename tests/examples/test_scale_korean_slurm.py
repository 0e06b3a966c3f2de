"""`sbatch examples/scale_korean.sh` under a real Slurm (tests/examples/slurm_cluster.py: two
emulated nodes on this machine, 1 task each), in the script's tiny mode cut short: demo corpora,
a tiny base pre-trained on English, upscaled, SCALE-Preserve on Korean at TP=2 across the two
nodes (gloo), the report, and the Hugging Face export verified against the Megatron model.

Then the same SCALE-Preserve run, from a copy of that job's data, base and upscaled checkpoint,
stopped twice over as Slurm stops jobs, each job requeueing itself and resuming:
- the time limit: `--signal=B:USR1@100` reaches the batch shell, which has Slurm pass SIGTERM
  to the training tasks; they save at the iteration boundary, the script runs `scontrol requeue`;
- pre-emption's notice: `scancel --signal=TERM JOB` (the tasks only, as slurmctld signals a job
  it pre-empts with a GraceTime); the tasks save and exit 0, the script sees the run unfinished
  and requeues.
Either way the requeued job skips the finished steps and resumes, and its metrics.jsonl equals
the uninterrupted job's (same seed and settings) record for record, bit for bit but for timings.
A plain `scancel` (SIGTERM to the batch shell) is not turned into a requeue.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.examples.slurm_cluster import (
    SlurmCluster,
    SlurmUnavailable,
    comparable_metrics,
    ensure_slurm,
    free_ports,
)

REPO = Path(__file__).resolve().parents[2]
# the tests signal the training once its log shows iteration 1; at ~0.3 s an iteration on an idle machine,
# 4 iterations could end before the signal arrives (seen in the array test), 16 leave seconds
ITERS = 16
SETTINGS = {
    "PYTHON": sys.executable, "PYTHONPATH": str(REPO), "METHODS": "scale-preserve",
    "SCALE_CONFIG": str(REPO / "examples" / "configs" / "tiny-cpu.env"),
    "BASE_ITERS": str(ITERS), "TRAIN_ITERS": str(ITERS), "WARMUP_ITERS": "1", "SAVE_INTERVAL": str(ITERS),
    "EVAL_ITERS": "1", "EVAL_INTERVAL": str(ITERS), "LOG_INTERVAL": "1", "OMP_NUM_THREADS": "1",
}
# the header asks for 8 GPUs x 8 tasks per node; sbatch's own flags override it
SHAPE = ("--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--gpus-per-node=0")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    try:
        ensure_slurm()
    except SlurmUnavailable as e:
        pytest.skip(f"no Slurm test cluster: {e}")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2)
    c.start()
    yield c
    c.stop()
    alive = [n for n, p in c.procs.items() if p.poll() is None]
    assert not alive, f"daemons still running after stop: {alive}"


@dataclass
class Job:
    id: str
    state: str
    code: str
    text: str
    work: Path


@pytest.fixture(scope="module")
def pipeline(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The whole recipe as one job, uninterrupted: the reference the requeued runs must equal."""
    root = tmp_path_factory.mktemp("pipeline")
    work, out = root / "work", root / "job.out"
    env = {**SETTINGS, "WORKDIR": str(work),
           "MASTER_PORT": str(free_ports(1)[0])}  # not the script's job-id default: other runs may share the host
    job = cluster.submit(str(REPO / "examples" / "scale_korean.sh"), *SHAPE, "--time=00:15:00", f"--output={out}",
                         env=env, cwd=str(REPO))
    state, code = cluster.wait_job(job, timeout=900)
    return Job(job, state, code, out.read_text() if out.exists() else "(no job output)", work)


def test_sbatch_tiny_pipeline_on_two_nodes(pipeline: Job) -> None:
    job, text, work = pipeline.id, pipeline.text, pipeline.work
    assert (pipeline.state, pipeline.code) == ("COMPLETED", "0:0"), f"{pipeline.state} {pipeline.code}\n{text[-6000:]}"

    # the job spans both nodes; MASTER_ADDR is the first node's name (resolvable in the job)
    assert re.search(rf"job {job}: nodes n\[1-2\], 2 tasks, master n1:\d+, restart 0", text), text[-4000:]
    # every srun step placed rank 0 on n1 and rank 1 on n2, and the TP=2 gloo group trained
    assert re.search(r"rank 0 of 2 on node n1 \(local rank 0\), master n1:", text), text[-4000:]
    assert re.search(r"rank 1 of 2 on node n2 \(local rank 0\), master n1:", text), text[-4000:]
    iterations = re.findall(rf"iteration\s+(\d+)/\s*{ITERS} \|.*lm loss: (\S+)", text)
    assert [int(i) for i, _ in iterations] == [*range(1, ITERS + 1)] * 2, text[-4000:]  # base, then preserve
    assert all(float(loss) > 0 for _, loss in iterations)

    results = json.loads((work / "report" / "results.json").read_text())
    assert [r["method"] for r in results["runs"]] == ["scale-preserve"]
    assert (work / "report" / "perplexity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (work / "runs" / "scale-preserve" / "latest_checkpointed_iteration.txt").read_text().strip() == str(ITERS)
    exported = json.loads((work / "hf" / "scale-preserve" / "config.json").read_text())
    assert "auto_map" in exported, exported
    assert re.search(r'"verify_max_abs_error": [0-9.e-]+', text), text[-4000:]
    # the last step: greedy English and Korean continuations of the export
    samples = json.loads((work / "report" / "generations.json").read_text())
    assert list(samples) == ["scale-preserve"] and set(samples["scale-preserve"]) == {"en", "ko"}
    assert all(s["text"] for lang in samples["scale-preserve"].values() for s in lang)


# ---- stopped by Slurm, requeued, resumed ---------------------------------------------------------


def _records(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


class Watch:
    """One requeue test's job: its copy of the pipeline's work dir, its output, polling."""

    def __init__(self, cluster: SlurmCluster, pipeline: Job, root: Path) -> None:
        assert (pipeline.state, pipeline.code) == ("COMPLETED", "0:0"), "the pipeline job failed (see the test above)"
        self.cluster, self.pipeline = cluster, pipeline
        self.work, self.out = root / "work", root / "job.out"
        for part in ("data", "runs/base", "ckpt/scale-preserve", "records"):  # skipped by the job: done (records: recipe/records.py)
            shutil.copytree(pipeline.work / part, self.work / part)
        self.id = ""

    def submit(self, *flags: str) -> str:
        env = {**SETTINGS, "WORKDIR": str(self.work), "EXPORT": "0", "MASTER_PORT": str(free_ports(1)[0])}
        self.id = self.cluster.submit(str(REPO / "examples" / "scale_korean.sh"), *SHAPE, *flags,
                                      f"--output={self.out}", env=env, cwd=str(REPO))
        return self.id

    def text(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def until(self, what: str, ready: Callable[[], bool], timeout: float) -> float:
        """Poll until ready() (seconds it took), or fail with the job's output."""
        t0 = time.monotonic()
        while not ready():
            if time.monotonic() - t0 > timeout:
                pytest.fail(f"job {self.id}: no {what} after {timeout:.0f} s: {self.cluster.show_job(self.id)}\n"
                            f"{self.text()[-5000:]}")
            time.sleep(0.25)
        return time.monotonic() - t0

    def training(self) -> None:
        """Until the method's run has logged iteration 1 (its ranks are in the training loop)."""
        self.until("iteration 1", lambda: re.search(rf"iteration\s+1/\s*{ITERS} \|", self.text()) is not None, 600)

    def requeued_then_started(self, *update: str) -> dict[str, str]:
        """The job requeued itself: it is pending until BeginTime = the requeue + the job
        credential's lifetime (120 s, AuthInfo=cred_expire) + 1 s, after which no credential of
        the old run can be replayed. Slurm refuses to start it within the second of the requeue
        (the node kills it: "Job credential revoked", the job FAILS); two seconds on, the test
        cuts the wait with StartTime=now (and any `update`, e.g. a time limit to restore)."""
        self.until("requeue", lambda: self.cluster.show_job(self.id).get("Restarts") == "1", 120)
        self.until("pending", lambda: self.cluster.show_job(self.id)["JobState"] == "PENDING", 60)
        pending = self.cluster.show_job(self.id)
        requeued = datetime.fromisoformat(pending["SubmitTime"]).timestamp()  # the requeue resets it
        time.sleep(max(0.0, requeued + 2 - time.time()))
        self.cluster.run("scontrol", "update", f"JobId={self.id}", "StartTime=now", *update)
        return pending

    def finished(self) -> tuple[str, str]:
        return self.cluster.wait_job(self.id, timeout=600)

    def check_resumed(self, state_code: tuple[str, str]) -> int:
        """Completed after one requeue, resumed where it saved, same metrics as uninterrupted:
        returns the iteration it stopped at."""
        text = self.text()
        assert state_code == ("COMPLETED", "0:0"), f"{state_code}\n{text[-6000:]}"
        job = self.cluster.show_job(self.id)
        assert (job["Restarts"], job["JobState"], job["Requeue"]) == ("1", "COMPLETED", "1"), job
        # one output file, appended by both runs (--open-mode=append)
        starts = re.findall(rf"job {self.id}: nodes n\[1-2\], 2 tasks, master n1:\d+, restart (\d)", text)
        assert starts == ["0", "1"], text[-6000:]
        first, second = text.split("restart 1\n", 1)
        (stopped,) = map(int, re.findall(r"stopping at iteration (\d+) on a signal", first))
        assert 1 <= stopped < ITERS, first[-4000:]
        assert "scale_korean.sh: requeued job" in first and "step 5: evaluate" not in first, first[-4000:]
        # the requeued run skipped data, base and upscaling, and resumed the run from its save
        for done in ("demo corpora ready in", "base trained:", "upscaled:"):
            assert done in second, second[:3000]
        assert f"resuming from iteration {stopped} of {ITERS} saved in {self.work / 'runs' / 'scale-preserve'}" in second
        resumed = [int(i) for i in re.findall(rf"iteration\s+(\d+)/\s*{ITERS} \|", second)]
        assert resumed == list(range(stopped + 1, ITERS + 1)), second[-4000:]
        assert (self.work / "report" / "results.json").is_file()

        got = _records(self.work / "runs" / "scale-preserve" / "metrics.jsonl")
        want = _records(self.pipeline.work / "runs" / "scale-preserve" / "metrics.jsonl")
        # the resumed run records what it loaded (the training entry's "resume" record), then
        # continues the uninterrupted run's records exactly
        resumes = [(r["iteration"], r["checkpoint"]) for r in got if r["kind"] == "resume"]
        assert resumes == [(stopped, str(self.work / "runs" / "scale-preserve" / f"iter_{stopped:07d}"))], resumes
        got = [r for r in got if r["kind"] != "resume"]
        assert [r.get("start_iteration") for r in got if r["kind"] == "train"] == (
            [0] * stopped + [stopped] * (ITERS - stopped))
        assert comparable_metrics(got, self.work) == comparable_metrics(want, self.pipeline.work)  # floats compare exactly
        return stopped


def _minutes_from(start: str, now: float) -> float:
    return (now - datetime.fromisoformat(start).timestamp()) / 60


def test_time_limit_signal_saves_requeues_and_resumes(cluster: SlurmCluster, pipeline: Job, tmp_path: Path) -> None:
    """--signal=B:USR1@100 sent by slurmctld itself, when the time limit comes near. slurmctld checks
    time limits every 30 s (PERIODIC_TIMEOUT), sending the signal at the first check where
    end - now <= 100 + 30 s. To have it arrive at a known iteration, the test stops the training
    tasks (SIGSTOP through Slurm) once iteration 1 is logged, cuts the limit to the next whole
    minute at least 70 s away (so the signal goes at the next check, and the job cannot time out
    before it requeues), waits for the batch shell's trap, and lets the tasks go on (SIGCONT):
    SIGTERM is then pending in them, and they save at the boundary of the iteration they were in."""
    w = Watch(cluster, pipeline, tmp_path)
    job = w.submit("--time=10", "--signal=B:USR1@100")
    w.training()
    cluster.run("scancel", "--signal=STOP", job)
    info = cluster.show_job(job)
    limit = math.ceil(_minutes_from(info["StartTime"], time.time()) + 70 / 60)
    assert limit < 10 - (100 + 30) / 60, f"the job took too long to reach iteration 1: {info}"  # no signal yet
    cluster.run("scontrol", "update", f"JobId={job}", f"TimeLimit={limit}")
    assert cluster.show_job(job)["TimeLimit"] == f"00:{limit:02d}:00"
    waited = w.until("SIGUSR1 from the time limit", lambda: "scale_korean.sh: SIGUSR1" in w.text(), 45)
    print(f"USR1 came {waited:.1f} s after the time limit was cut to {limit} min")
    cluster.run("scancel", "--signal=CONT", job)
    pending = w.requeued_then_started("TimeLimit=10")  # the cut limit would stop the requeued run too
    delay = datetime.fromisoformat(pending["StartTime"]) - datetime.fromisoformat(pending["SubmitTime"])
    assert delay.total_seconds() == 121, f"requeued job held {delay} (expected the credential lifetime + 1 s): {pending}"
    stopped = w.check_resumed(w.finished())
    text = w.text()
    assert "SIGTERM" not in text.split("restart 1\n")[0], "only USR1 should reach the batch shell"
    print(f"stopped at iteration {stopped}")


def test_preemption_term_to_the_tasks_saves_requeues_and_resumes(cluster: SlurmCluster, pipeline: Job,
                                                                  tmp_path: Path) -> None:
    """Pre-emption's notice (PreemptMode=REQUEUE/CANCEL with a GraceTime): slurmctld sends SIGTERM to
    the job's tasks, not its batch shell, which is what `scancel --signal=TERM JOB` does. The
    tasks save and exit 0; the script, which got no signal, finds the run unfinished, starts no
    further step (no report or export of a half-trained model) and requeues the job."""
    w = Watch(cluster, pipeline, tmp_path)
    job = w.submit("--time=00:15:00")
    w.training()
    cluster.run("scancel", "--signal=TERM", job)
    w.requeued_then_started()
    stopped = w.check_resumed(w.finished())
    first = w.text().split("restart 1\n")[0]
    assert "scale_korean.sh: the training stopped before its last iteration (a signal" in first, first[-3000:]
    assert "scale_korean.sh: SIG" not in first, "the batch shell got no signal"
    print(f"stopped at iteration {stopped}")


def test_scancel_is_not_undone_by_a_requeue(cluster: SlurmCluster, pipeline: Job, tmp_path: Path) -> None:
    """`scancel JOB` sends SIGTERM to the batch shell (and SIGKILL after KillWait): the script, here
    waiting on the training's srun, stops without requeueing, so a cancelled job stays cancelled."""
    w = Watch(cluster, pipeline, tmp_path)
    job = w.submit("--time=00:15:00")
    w.until("the training's srun", lambda: "rank 1 of 2 on node n2" in w.text(), 120)
    cluster.run("scancel", job)
    w.until("the script's last word", lambda: "scale_korean.sh: stopped without requeueing" in w.text()
            or "scale_korean.sh: requeued" in w.text(), 60)
    w.until("the end", lambda: cluster.show_job(job)["JobState"] not in ("RUNNING", "COMPLETING"), 60)
    info = cluster.show_job(job)
    assert (info["JobState"], info["Restarts"]) == ("CANCELLED", "0"), f"{info}\n{w.text()[-3000:]}"
    assert "scale_korean.sh: stopped without requeueing" in w.text(), w.text()[-3000:]

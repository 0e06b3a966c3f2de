"""The recipe's side of running jobs side by side, without Slurm or training: the lock files of
megatron_scale.recipe.lock (one holder, stale holders, races), the parts of an ARRAY=1 submission
and what it submits (megatron_scale.recipe.array), and the launcher's answers (`next`: wait while
another job holds an action; `exit`: release and record). The same on a real Slurm cluster, with
training: tests/examples/test_scale_korean_array.py."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from megatron_scale.recipe.command import Launch
from megatron_scale.recipe.launch import Launcher
from megatron_scale.recipe.array import part_of, submit, why_missing
from megatron_scale.recipe.lock import Locks, alive, holder_of
from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import Command, Key, actions
from tests.recipe._env import held_by_job_20

METHODS = "scale-preserve full scale-adapt"


def _states(**running: bool | None):  # noqa: ANN202
    """A fake squeue: job id -> running (True), gone (False), cannot tell (None)."""
    return lambda job: running.get(job, False)


def test_one_holder_at_a_time_and_only_the_holder_releases(tmp_path: Path) -> None:
    a = Locks(tmp_path, "slurm:11", _states(**{"11": True, "12": True}))
    b = Locks(tmp_path, "slurm:12", _states(**{"11": True, "12": True}))
    assert a.acquire("base") is None
    assert a.acquire("base") is None  # ours already: kept
    assert b.acquire("base") == "slurm:11"
    record = json.loads(a.path("base").read_text())
    assert record["holder"] == "slurm:11" and record["key"] == "base"
    b.release("base")  # not b's: stays
    assert b.acquire("base") == "slurm:11"
    b.release_all()
    assert a.path("base").is_file()
    a.release_all()
    assert not a.path("base").exists()
    assert b.acquire("base") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.lock"]  # no temp files left


@pytest.mark.parametrize(("running", "stale"), [(False, True), (None, False), (True, False)],
                         ids=["job-gone-or-pending", "squeue-cannot-tell", "job-running"])
def test_a_lock_is_stale_when_its_slurm_job_is_gone(tmp_path: Path, running: bool | None, stale: bool) -> None:
    Locks(tmp_path, "slurm:7", _states(**{"7": True})).acquire("train-full")
    other = Locks(tmp_path, "slurm:8", _states(**{"7": running}))
    assert other.acquire("train-full") == (None if stale else "slurm:7")
    assert json.loads(other.path("train-full").read_text())["holder"] == ("slurm:8" if stale else "slurm:7")


def test_a_requeued_job_takes_back_its_own_lock(tmp_path: Path) -> None:
    """The run that held it was killed; the same job id, started again, is its holder."""
    Locks(tmp_path, "slurm:5", _states()).acquire("train-full")
    assert Locks(tmp_path, "slurm:5", _states(**{"5": True})).acquire("train-full") is None


def test_local_holders_are_processes_of_this_host(tmp_path: Path) -> None:
    host = socket.gethostname()
    assert holder_of({"SLURM_JOB_ID": "42", "SCALE_LAUNCHER_PID": "9"}) == "slurm:42"
    assert holder_of({"SCALE_LAUNCHER_PID": "9"}) == f"pid:{host}:9"
    assert alive(f"pid:{host}:{os.getpid()}", "pid:x:1")
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    assert not alive(f"pid:{host}:{dead}", "pid:x:1")
    assert alive(f"pid:elsewhere:{dead}", "pid:x:1")  # another host's process: cannot tell, held
    (tmp_path / "data.lock").write_text(json.dumps({"holder": f"pid:{host}:{dead}"}))
    assert Locks(tmp_path, f"pid:{host}:{os.getpid()}").acquire("data") is None


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_racing_jobs_get_one_holder(tmp_path: Path, stale: bool) -> None:
    """Twelve holders at once, on a free lock or on one left by a dead job: exactly one gets it."""
    if stale:
        Locks(tmp_path, "slurm:1", _states()).acquire("base")
    n, go, won = 12, threading.Barrier(12), []

    def race(i: int) -> None:
        locks = Locks(tmp_path, f"slurm:{100 + i}", lambda job: job != "1")  # all alive but job 1
        go.wait()
        if locks.acquire("base") is None:
            won.append(f"slurm:{100 + i}")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1, won
    assert json.loads((tmp_path / "base.lock").read_text())["holder"] == won[0]


def _settings(work: Path, **env: str) -> Settings:
    return Settings.from_env({"WORKDIR": str(work), "METHODS": METHODS, "ROUTE_SWEEP": "0", **env})


def test_the_parts_split_the_recipe(tmp_path: Path) -> None:
    """prepare + one part per method + report hold every action of the whole recipe once, in order."""
    s = _settings(tmp_path)
    whole = [(a.step, str(a.key)) for a in actions(s)]
    parts = {p: [(a.step, str(a.key)) for a in actions(s, p)] for p in ("prepare", *s.methods, "report")}
    assert sorted(a for got in parts.values() for a in got) == sorted(whole)
    assert len({k for _, k in whole}) == len(whole)  # one lock per action
    assert [k for _, k in parts["prepare"]] == ["data", "base", "text-bytes"]
    assert [k for _, k in parts["scale-adapt"]] == ["upscale-scale-adapt", "train-scale-adapt", "export-scale-adapt"]
    assert [k for _, k in parts["full"]] == ["train-full", "export-full"]
    assert [k for _, k in parts["report"]] == ["report", "samples"]
    # with BENCHMARKS: the base's in the preparation, each method's in its own task, after training
    bench = _settings(tmp_path, BENCHMARKS="arc_easy")
    assert [str(a.key) for a in actions(bench, "prepare")] == ["data", "base", "text-bytes", "benchmark-base"]
    assert [str(a.key) for a in actions(bench, "full")] == ["train-full", "benchmark-full", "export-full"]
    env = {"SCALE_PART": "methods", "SLURM_ARRAY_TASK_ID": "1"}
    assert part_of(s, env) == "full" and part_of(s, {}) is None and part_of(s, {"SCALE_PART": "report"}) == "report"
    with pytest.raises(SettingsError, match="SLURM_ARRAY_TASK_ID='3'"):
        part_of(s, {**env, "SLURM_ARRAY_TASK_ID": "3"})
    with pytest.raises(SettingsError, match="SCALE_PART='train'"):
        part_of(s, {"SCALE_PART": "train"})


def test_the_report_of_a_side_by_side_run_lists_what_failed_and_why(tmp_path: Path) -> None:
    s = _settings(tmp_path, TRAIN_ITERS="20")
    run = tmp_path / "runs" / "full"
    run.mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("20\n")
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "scale-adapt.json").write_text(json.dumps({
        "state": "failed", "job": "9_2", "restart": 0, "step": "6: continue on Korean with --method scale-adapt",
        "exit_status": 1, "log": "/l/methods-9_2.out", "log_tail": ["Traceback", "ValueError: boom"]}))
    (report,) = [a.resolve() for a in actions(s, "report") if a.key == Key("report")]
    assert isinstance(report, Command)
    args = list(report.args)
    assert [args[i + 1].split("=")[0] for i, a in enumerate(args) if a == "--run"] == ["full"]
    failed = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--failed")
    assert failed["scale-adapt"] == ("task 9_2 (restart 0) failed in step '6: continue on Korean with --method "
                                     "scale-adapt' with exit status 1; log /l/methods-9_2.out: Traceback | ValueError: boom")
    assert failed["scale-preserve"].startswith("no record of its task")
    (tmp_path / "slurm" / "prepare.json").write_text(json.dumps({"state": "failed", "job": "8", "step": "2: data"}))
    assert why_missing(s, "scale-preserve") == "never ran: the preparation job 8 failed in step '2: data'"
    # the whole recipe in one job reports every method (each trained before the report)
    (whole,) = [a.resolve() for a in actions(s) if a.key == Key("report")]
    assert isinstance(whole, Command) and "--failed" not in whole.args and whole.args.count("--run") == 3


def test_submit_chains_prepare_methods_and_report(tmp_path: Path) -> None:
    s, calls = _settings(tmp_path), []

    def sbatch(args: list[str]) -> str:
        calls.append(args)
        return str(100 + len(calls))

    said = submit(s, "/repo/examples/scale_korean.sh", "cfg.env", ["--time=1:00:00", "--partition=gpu"], run=sbatch)
    prep, methods, report = calls
    assert prep[-4:] == ["--time=1:00:00", "--partition=gpu", "/repo/examples/scale_korean.sh", "cfg.env"]
    assert "--export=ALL,SCALE_PART=prepare" in prep and f"--output={tmp_path}/logs/prepare-%j.out" in prep
    assert {"--array=0-2", "--dependency=afterok:101", "--export=ALL,SCALE_PART=methods",
            f"--output={tmp_path}/logs/methods-%A_%a.out"} <= set(methods)
    assert {"--dependency=afterany:102", "--export=ALL,SCALE_PART=report"} <= set(report)
    assert said[1] == f"method scale-preserve: task 102_0 (after job 101 succeeds), log {tmp_path}/logs/methods-102_0.out"
    (record,) = [json.loads(x) for x in (tmp_path / "slurm" / "submissions.jsonl").read_text().splitlines()]
    assert (record["prepare"], record["methods"], record["report"]) == ("101", "102", "103")
    assert record["tasks"] == {"0": "scale-preserve", "1": "full", "2": "scale-adapt"}
    # resubmitting one method: --array picks its task, and goes to the methods' job only
    calls.clear()
    said = submit(s, "x.sh", "cfg.env", ["--array=2"], run=sbatch)
    assert "--array=2" in calls[1] and not any(a.startswith("--array") for a in calls[0] + calls[2])
    assert [ln.split(":")[0] for ln in said] == ["prepare", "method scale-adapt", "report", "watch"]
    with pytest.raises(SettingsError, match=r"--array=3: the tasks are METHODS' indices, 0 \(scale-preserve\)"):
        submit(s, "x.sh", "cfg.env", ["--array=3"], run=sbatch)
    calls.clear()  # sbatch's other spellings: a flag's value may be the next word
    submit(s, "x.sh", "cfg.env", ["-t", "1:00:00", "--array", "0,2", "-A", "proj"], run=sbatch)
    assert "--array=0,2" in calls[1] and all(c[-6:-2] == ["-t", "1:00:00", "-A", "proj"] for c in calls)
    with pytest.raises(SettingsError, match="sbatch flag -a without its value"):
        submit(s, "x.sh", "cfg.env", ["-a"], run=sbatch)


def test_the_launcher_waits_while_another_job_holds_the_action(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """An action another job holds the lock of is waited for (LOCK_POLL seconds at a time, the
    header and the wait said once), decided under the lock once it is free, and as the launcher
    ends it releases this job's locks and records its part."""
    env = {"WORKDIR": str(tmp_path), "METHODS": METHODS, "ROUTE_SWEEP": "0", "LOCK_POLL": "7",
           "SCALE_PART": "methods", "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_ID": "21"}
    naps, sleep = held_by_job_20(monkeypatch, tmp_path / "locks", "train-full", 14)  # free after two looks

    s = Settings.from_env(env)
    job = Launcher(s, Launch.from_env(env), env, part_of(s, env), sleep=sleep)
    got = job.begin(1)
    err = capsys.readouterr().err
    assert err.count("step 5: continue on Korean with --method full") == 1
    assert err.count("waiting: slurm:20 is doing this") == 1 and "looking again every 7 s" in err
    assert sum(naps) == 14 and max(naps) <= 0.5  # in short naps: a signal is answered within half a second
    assert got is not None and got.kind == "train" and "--method" in got.args
    assert json.loads((tmp_path / "locks" / "train-full.lock").read_text())["holder"] == "slurm:21"
    monkeypatch.setattr("megatron_scale.recipe.array._stdout_of", lambda job: "")
    job.finish(1, 3)
    assert not (tmp_path / "locks" / "train-full.lock").exists()
    record = json.loads((tmp_path / "slurm" / "full.json").read_text())
    assert (record["state"], record["exit_status"], record["step"]) == (
        "failed", 3, "5: continue on Korean with --method full (100 iterations)")


def test_a_report_is_written_again_only_when_its_inputs_changed(tmp_path: Path) -> None:
    """A second submission (or a requeue) into the same WORKDIR skips a report that is up to date."""
    s = _settings(tmp_path, TRAIN_ITERS="20", METHODS="full")
    for run in ("base", "full"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "runs" / "full" / "latest_checkpointed_iteration.txt").write_text("20\n")
    results = tmp_path / "report" / "results.json"
    (tmp_path / "report" / "eval").mkdir(parents=True)
    (tmp_path / "report" / "eval" / "text_bytes.json").write_text("{}\n")  # bits per byte's input

    def report() -> Command | str:
        return next(a.resolve() for a in actions(s, "report") if a.key == Key("report"))

    assert isinstance(report(), Command)
    results.write_text(json.dumps({"runs": [{"method": "full"}]}))
    assert report() == f"report up to date: {tmp_path / 'report' / 'report.md'}"
    os.utime(tmp_path / "runs" / "full" / "metrics.jsonl", (results.stat().st_mtime + 5,) * 2)
    assert isinstance(report(), Command)  # a run newer than the report
    results.write_text(json.dumps({"runs": [{"method": "full"}], "failed": {"x": "y"}}))
    assert isinstance(report(), Command)  # it listed a failure that is gone

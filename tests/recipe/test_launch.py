"""megatron_scale.recipe.launch and .command without training: the launcher decides each action as
it reaches it, launches srun or torchrun with the same settings, checks a training again after it
ends, and stops, saves and requeues on the signals Slurm sends (docs/recipe.md, "Requeue and
pre-emption"). Every process is a fake here that writes what its tool would; the real launches,
under a real Slurm, are tests/examples/test_scale_korean_slurm.py and test_scale_korean_array.py."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron_scale.recipe.__main__ import main
from megatron_scale.recipe.array import part_of
from megatron_scale.recipe.command import RANK_SHELL, Command, Launch
from megatron_scale.recipe.launch import Launcher
from megatron_scale.recipe.settings import Settings
from tests.recipe._env import flag, held_by_job_20, made

TINY = {"METHODS": "full", "EXPORT": "0", "BASE_ITERS": "20", "TRAIN_ITERS": "20", "PYTHON": "py"}


def _launcher(env: dict[str, str], spawn: Callable[..., object] | None = None) -> Launcher:
    s = Settings.from_env(env)
    return Launcher(s, Launch.from_env(env), env, part_of(s, env), **({"spawn": spawn} if spawn else {}))


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith(("LR", "TRAIN_", "METHODS", "HF_MODEL", "EXPORT", "SAMPLES",
                                                       "SLURM_", "TP"))]:
        monkeypatch.delenv(var)


def test_each_action_is_decided_when_the_launcher_reaches_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    L = _launcher({"WORKDIR": str(tmp_path), "METHODS": "full"})
    data = str(tmp_path / "data")
    assert L.begin(1) == Command(kind="single", args=("tools/prepare_demo_data.py", "--output-dir", data))
    assert "step 1: data" in capsys.readouterr().err
    made(L.s, "export-full")
    assert L.begin(6) is None and "exported:" in capsys.readouterr().err
    got = L.begin(7)
    assert got is not None and got.args[0] == "tools/generate_samples.py"
    assert len(L.todo) == 7
    _clean(monkeypatch)
    monkeypatch.setenv("WORKDIR", str(tmp_path))
    monkeypatch.setenv("TP", "x")
    assert main(["run"]) == 2 and "TP='x' is not an integer" in capsys.readouterr().err
    for retired in (["next", "1"], ["done", "3"], ["plan", "x"], []):  # the old stdout protocol is gone
        assert main(retired) == 2 and "usage:" in capsys.readouterr().err


def test_a_training_is_checked_again_after_it_ends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After a training step (exit 0 also when it stopped on a signal, saved): a run short of its
    iterations is not finished and says where it resumes; a finished one is done."""
    run = tmp_path / "runs" / "full"
    (tmp_path / "runs" / "base").mkdir(parents=True)
    (tmp_path / "runs" / "base" / "latest_checkpointed_iteration.txt").write_text("300")
    L = _launcher({"WORKDIR": str(tmp_path), "METHODS": "full"})
    assert L.check(3) is False
    assert capsys.readouterr().err == "not finished\n"  # nothing saved yet
    run.mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("40\n")
    assert L.check(3) is False
    assert capsys.readouterr().err == f"not finished: resuming from iteration 40 of 100 saved in {run}\n"
    got = L.begin(3)
    assert got is not None and got.kind == "train"
    assert capsys.readouterr().err.endswith(f"resuming from iteration 40 of 100 saved in {run}\n")
    assert flag(list(got.args), "--load") == str(run)
    (run / "latest_checkpointed_iteration.txt").write_text("100\n")
    assert L.check(3) is True
    assert capsys.readouterr().err == f"trained: {run / 'iter_0000100'}\n"
    assert L.check(2) is True  # the base: 300 of 300


def test_srun_under_slurm_torchrun_here_from_the_same_settings(tmp_path: Path) -> None:
    here = Launch.from_env({"SCALE_REPO": "/r", "PYTHON": "/v/python", "NPROC": "3"})
    train, single = Command(kind="train", args=("--lr", "1")), Command(kind="single", args=("tools/x.py", "-a"))
    assert here.argv(train) == (["/v/python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                                 "-m", "megatron_scale.train", "--lr", "1"], False)
    assert here.argv(single) == (["/v/python", "tools/x.py", "-a"], False)
    assert here.master_port == 29500 and here.container_mounts == "/r:/r"
    job = Launch.from_env({"SCALE_REPO": "/r", "PYTHON": "python", "SLURM_JOB_ID": "1234", "SLURM_RESTART_COUNT": "2",
                           "CONTAINER_IMAGE": "nvcr.io#img"})
    assert job.master_port == 29500 + 234 + 2  # a requeued run takes the next port
    box = ["--container-image=nvcr.io#img", "--container-mounts=/r:/r", "--container-workdir=/r"]
    assert job.argv(train) == (["srun", "--kill-on-bad-exit=1", *box, "bash", "-c", RANK_SHELL, "rank", "python", "-m",
                                "megatron_scale.train", "--lr", "1"], True)
    assert job.argv(single) == (["srun", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1", *box, "python",
                                 "tools/x.py", "-a"], True)
    env = job.step_env({"PYTHONPATH": "/p", "OMP_NUM_THREADS": "", "NCCL_IB_HCA": "mlx5"})
    assert (env["PYTHONPATH"], env["OMP_NUM_THREADS"], env["NCCL_IB_HCA"], env["HF_HUB_OFFLINE"]) == (
        "/r:/p", "1", "mlx5", "1")
    assert env["MASTER_PORT"] == str(job.master_port) and env["SCALE_LAUNCHER_PID"] == str(os.getpid())
    with pytest.raises(ValueError, match="NPROC='two' is not an integer"):
        Launch.from_env({"NPROC": "two"})


class Tools:
    """Every process the launcher starts, faked: each writes what its tool would, enough for the
    next step to see it done. `during(argv)` runs while a process runs (a signal, a crash)."""

    def __init__(self, work: Path, during: Callable[[list[str]], int | None] = lambda argv: None,
                 data: Path | None = None) -> None:
        self.work, self.during, self.launched, self.signals = work, during, [], []
        self.data = data or work / "data"

    def __call__(self, argv: list[str], env: dict[str, str]) -> Tools:
        self.launched.append(argv)
        self.argv = argv
        return self

    def wait(self) -> int:
        argv = self.argv
        rc = self.during(argv)
        data = self.data
        if "tools/prepare_demo_data.py" in argv:
            data.mkdir(parents=True, exist_ok=True)
            (data / "tokenizer").mkdir(exist_ok=True)
            for name in ("en_train", "ko_train", "ko_valid", "en_valid", "en_modern_valid"):
                for ext in ("bin", "idx"):
                    (data / f"{name}_text_document.{ext}").write_text("")
        elif "megatron_scale.train" in argv:
            save = Path(flag(argv, "--save"))
            save.mkdir(parents=True, exist_ok=True)
            done = int(flag(argv, "--train-iters")) if rc is None else 5
            (save / "latest_checkpointed_iteration.txt").write_text(f"{done}\n")
            (save / "metrics.jsonl").write_text("{}\n")
        elif "tools/text_bytes.py" in argv:
            sets = {a.split("=", 1)[0]: {"prefix": a.split("=", 1)[1]} for a in argv if "_text_document" in a}
            Path(flag(argv, "--output")).parent.mkdir(parents=True, exist_ok=True)
            Path(flag(argv, "--output")).write_text(json.dumps({"tokenizer": flag(argv, "--tokenizer-model"),
                                                                "sets": sets}))
        elif "tools/scale_report.py" in argv:
            Path(flag(argv, "--output"), "results.json").write_text(json.dumps({"runs": [{"method": "full"}]}))
        return 0 if rc is None else rc

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"WORKDIR": str(tmp_path), "SCALE_REPO": str(tmp_path), **TINY, **more}


def test_the_whole_job_runs_each_step_once_and_a_second_run_skips_them(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    tools = Tools(tmp_path)
    assert _launcher(_env(tmp_path), tools).main() == 0
    assert ["train" if "megatron_scale.train" in a else a[1] for a in tools.launched] == [
        "tools/prepare_demo_data.py", "train", "train", "tools/text_bytes.py", "tools/scale_report.py"]
    out, err = capsys.readouterr()
    assert out.startswith("no Slurm: running on this machine with torchrun, 2 ranks\n")
    assert f"repo {tmp_path}, python py, work dir {tmp_path}, base a tiny base pre-trained here, methods: full" in out
    assert "step 4: evaluate" in err and "done in " in err
    assert not list((tmp_path / "locks").glob("*.lock")) and not list((tmp_path / "timings").glob("*.start"))
    assert sorted(p.stem for p in (tmp_path / "timings").glob("*.json")) == [
        "base", "data", "report", "text-bytes", "train-full"]
    again = Tools(tmp_path)
    assert _launcher(_env(tmp_path), again).main() == 0 and again.launched == []
    assert capsys.readouterr().err.count("skipped, done before:") == 5


def test_jobs_of_other_workdirs_make_a_shared_data_dir_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """DATA_DIR outside WORKDIR: its datasets' lock and completion record are its own, so a job with
    another WORKDIR finds them done instead of clearing and re-making them under a job reading
    them (three recipe runs launched side by side once removed one another's files), and waits
    while another job is making them."""
    shared = tmp_path / "shared"
    first = Tools(tmp_path / "a", data=shared)
    assert _launcher(_env(tmp_path / "a", DATA_DIR=str(shared)), first).main() == 0
    assert "tools/prepare_demo_data.py" in first.launched[0]
    assert (shared / "records" / "data.json").is_file() and not (tmp_path / "a" / "records" / "data.json").exists()
    assert not list((shared / "locks").glob("*.lock"))
    made = {p.name: p.stat().st_ino for p in shared.iterdir() if p.is_file()}
    second = Tools(tmp_path / "b", data=shared)
    assert _launcher(_env(tmp_path / "b", DATA_DIR=str(shared)), second).main() == 0
    assert [a[1] for a in second.launched if "megatron_scale.train" not in a][:1] == ["tools/text_bytes.py"]
    assert f"skipped, done before: demo corpora ready in {shared}" in capsys.readouterr().err
    assert {p.name: p.stat().st_ino for p in shared.iterdir() if p.is_file()} == made  # not cleared, not redone

    # a third job waits while another holds the shared lock, then decides under it
    (shared / "records" / "data.json").unlink()
    _, sleep = held_by_job_20(monkeypatch, shared / "locks", "data", 2)

    env = _env(tmp_path / "c", DATA_DIR=str(shared), SLURM_JOB_ID="21", LOCK_POLL="1")
    s = Settings.from_env(env)
    got = Launcher(s, Launch.from_env(env), env, part_of(s, env), sleep=sleep).begin(1)
    assert f"waiting: slurm:20 is doing this ({shared / 'locks' / 'data.lock'})" in capsys.readouterr().err
    assert isinstance(got, Command) and got.args[0] == "tools/prepare_demo_data.py"  # no record: made again
    assert json.loads((shared / "locks" / "data.lock").read_text())["holder"] == "slurm:21"
    assert not (tmp_path / "c" / "locks" / "data.lock").exists()


def test_a_training_stopped_by_its_tasks_ends_the_job_and_the_next_run_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its tasks got SIGTERM (not the launcher), saved at iteration 5 and exited 0: no further step;
    without Slurm the job stops, and the same command resumes the run from its save."""
    tools = Tools(tmp_path, during=lambda argv: 0 if "--method" in argv and "full" in argv
                  and "ko_train" in " ".join(argv) else None)
    assert _launcher(_env(tmp_path), tools).main() == 0
    assert len(tools.launched) == 3  # data, base, the stopped run
    out, err = capsys.readouterr()
    assert f"not finished: resuming from iteration 5 of 20 saved in {tmp_path / 'runs' / 'full'}" in err
    assert ("scale_korean.sh: the training stopped before its last iteration (a signal to its tasks, or "
            "--exit-interval)\nscale_korean.sh: stopped; run the same command again to resume\n") in out
    resumed = Tools(tmp_path)
    assert _launcher(_env(tmp_path), resumed).main() == 0
    assert flag(resumed.launched[0], "--load") == str(tmp_path / "runs" / "full")


def _signalled(sig: int) -> Callable[[list[str]], int | None]:
    """A training during which the launcher gets `sig` (as Slurm sends it to the batch shell)."""
    def during(argv: list[str]) -> int | None:
        if "megatron_scale.train" in " ".join(argv) and "ko_train" in " ".join(argv):
            os.kill(os.getpid(), sig)
            return 0  # the run saved and stopped
        return None
    return during


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_signal_stops_the_running_step_and_no_other_starts(tmp_path: Path, sig: int,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    tools = Tools(tmp_path, during=_signalled(sig))
    before = signal.getsignal(signal.SIGTERM)
    assert _launcher(_env(tmp_path), tools).main() == 0
    assert signal.getsignal(signal.SIGTERM) == before  # the launcher's handlers are its own while it runs
    assert len(tools.launched) == 3 and tools.signals == [signal.SIGTERM]  # torchrun passes it on
    out, err = capsys.readouterr()
    assert f"scale_korean.sh: {signal.Signals(sig).name}: asking the running step to save and stop" in err
    assert "scale_korean.sh: stopped on a signal\nscale_korean.sh: stopped; run the same command again" in out
    assert not list((tmp_path / "locks").glob("*.lock"))


@pytest.mark.parametrize("sig, said", [(signal.SIGUSR1, "scale_korean.sh: requeued job 77; when it starts again"),
                                       (signal.SIGTERM, "scale_korean.sh: stopped without requeueing")])
def test_under_slurm_usr1_requeues_and_term_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int,
                                                      said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Under Slurm the step is asked through Slurm (scancel --signal=TERM: every step's tasks, not
    srun, which would SIGKILL them); USR1 (the time limit) requeues the job, TERM (scancel) does not."""
    ran = []

    def slurm(argv: list[str], **kw: object) -> object:
        ran.append(argv)
        return type("Done", (), {"returncode": 0, "stdout": "n1\nn2\n"})()

    monkeypatch.setattr("megatron_scale.recipe.launch.subprocess.run", slurm)
    monkeypatch.setattr("megatron_scale.recipe.array._stdout_of", lambda job: "")
    tools = Tools(tmp_path, during=_signalled(sig))
    env = _env(tmp_path, SLURM_JOB_ID="77", SLURM_JOB_NODELIST="n[1-2]", SLURM_NTASKS="2")
    assert _launcher(env, tools).main() == 0
    assert tools.launched[1][:2] == ["srun", "--kill-on-bad-exit=1"] and tools.signals == []
    assert ["scancel", "--signal=TERM", "77"] in ran
    assert (["scontrol", "requeue", "77"] in ran) == (sig == signal.SIGUSR1)
    out, _ = capsys.readouterr()
    assert "job 77: nodes n[1-2], 2 tasks, master n1:29577, restart 0" in out and said in out


def test_a_failed_step_ends_the_job_with_its_status_and_its_part_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("megatron_scale.recipe.array._stdout_of", lambda job: "")
    tools = Tools(tmp_path, during=lambda argv: 3 if "megatron_scale.train" in argv else None)
    env = _env(tmp_path, SCALE_PART="prepare", SLURM_JOB_ID="5")
    monkeypatch.setattr("megatron_scale.recipe.launch.subprocess.run",
                        lambda argv, **kw: type("Done", (), {"returncode": 0, "stdout": "n1\n"})())
    assert _launcher(env, tools).main() == 3
    record = json.loads((tmp_path / "slurm" / "prepare.json").read_text())
    assert (record["state"], record["exit_status"], record["step"]) == (
        "failed", 3, "2: pre-train a tiny base on English (20 iterations, --method full from scratch)")
    assert not list((tmp_path / "locks").glob("*.lock"))

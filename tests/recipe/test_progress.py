"""megatron_scale.recipe.progress: each step's "step k of N", time so far and estimate of what is
left, from the steps this WORKDIR has timed (or the config's STEP_SECONDS); and the launcher's
protocol around it (`next` times what it launched, says what it skips and why)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from megatron_scale.recipe.command import Key, Launch
from megatron_scale.recipe.launch import Launcher
from megatron_scale.recipe.progress import Timed, Timings, duration, estimate, where
from megatron_scale.recipe.settings import Settings, SettingsError
from tests.recipe._env import made


def test_action_keys_name_their_files_and_keep_their_kind() -> None:
    """A key's text names its lock, record and timing (the names WORKDIRs already hold); its kind
    is a field, never parsed back from the text (a dataset named "train-x" stays data)."""
    keys = (Key("train", "scale-preserve"), Key("lm-eval", "full"), Key("data", "ko_train_text_document"),
            Key("data"), Key("data", "demo-raw"), Key("demo-model"), Key("route-sweep"), Key("base"))
    assert [str(k) for k in keys] == ["train-scale-preserve", "lm-eval-full", "data-ko_train_text_document", "data",
                                      "data-demo-raw", "demo-model", "route-sweep", "base"]
    assert [k.kind for k in keys] == ["train", "lm-eval", "data", "data", "data", "demo-model", "route-sweep", "base"]
    assert Key("data", "train-x").kind == "data" and f"{Key('data', 'train-x')}.lock" == "data-train-x.lock"


def test_estimate_by_kind_key_and_hint() -> None:
    timed = {"train-scale-preserve": Timed(100.0, 10, "train"), "train-full": Timed(60.0, 10, "train"),  # 8 s/it
             "upscale-scale-preserve": Timed(40.0, 1, "upscale"), "export-full": Timed(30.0, 1, "export")}
    # a method not timed: the kind's rate over all trainings; one timed (a resumed run): its own
    assert estimate({Key("train", "lora"): 5}, timed, {}) == (40.0, 0)
    assert estimate({Key("train", "full"): 4}, timed, {}) == (24.0, 0)
    assert estimate({Key("upscale", "scale-route"): 1, Key("export", "lora"): 1}, timed, {}) == (70.0, 0)
    # no timing of the kind: the hint; neither: counted as unknown
    assert estimate({Key("benchmark", "base"): 1, Key("samples"): 1}, timed, {"benchmark": 55.0}) == (55.0, 1)
    assert estimate({}, timed, {}) == (0.0, 0)
    # hints are per iteration for trainings; timings beat hints
    assert estimate({Key("train", "full"): 3, Key("report"): 1}, {}, {"train": 7.5, "report": 2}) == (24.5, 0)
    assert estimate({Key("upscale", "x"): 1}, timed, {"upscale": 999.0}) == (40.0, 0)
    # a timing written before timings recorded their kind costs its own key only
    old = {"train-full": Timed(60.0, 10)}
    assert estimate({Key("train", "full"): 1}, old, {}) == (6.0, 0)
    assert estimate({Key("train", "lora"): 1}, old, {"train": 2.0}) == (2.0, 0)


def test_durations_and_the_header_line() -> None:
    assert [duration(s) for s in (0, 12.4, 60, 185, 3599, 3720)] == [
        "0 s", "12 s", "1 min 00 s", "3 min 05 s", "59 min 59 s", "1 h 02 min"]
    now = lambda: 1000.0  # noqa: E731
    assert where(5, 12, 810.0, 560.0, 0, now) == "step 5 of 12 · 3 min 10 s so far · about 9 min 20 s left"
    assert where(1, 12, None, 0.0, 3, now) == "step 1 of 12 · time left not known yet (3 steps of a kind not timed yet)"
    assert where(2, 12, 990.0, 60.0, 1, now) == (
        "step 2 of 12 · 10 s so far · at least 1 min 00 s left (1 step of a kind not timed yet)")


def test_timings_keep_finished_actions_only(tmp_path: Path) -> None:
    clock = [100.0]
    t = Timings(tmp_path, now=lambda: clock[0])
    t.started(Key("train", "full"), 12)
    clock[0] = 190.0
    t.ended(Key("train", "full"), done=True)
    t.started(Key("export", "full"), 1)
    clock[0] = 400.0
    t.ended(Key("export", "full"), done=False)  # stopped on a signal: its time says nothing about a whole export
    t.ended(Key("upscale", "x"), done=True)  # never started here (skipped): nothing
    assert t.read() == {"train-full": Timed(90.0, 12, "train")}
    assert not list((tmp_path / "timings").glob("*.start"))


def test_step_seconds_setting(tmp_path: Path) -> None:
    s = Settings.from_env({"WORKDIR": str(tmp_path), "STEP_SECONDS": "train=8.5 export=30"})
    assert s.step_hints == {"train": 8.5, "export": 30.0}
    for bad in ("train", "train=fast", "=3", "export=-1"):
        with pytest.raises(SettingsError, match=f"STEP_SECONDS: '{bad}' is not KIND=SECONDS"):
            Settings.from_env({"WORKDIR": str(tmp_path), "STEP_SECONDS": bad})


def test_the_launcher_says_where_it_is_and_what_it_skips(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny recipe with one method: step 1 (data) launched and timed when action 2 begins and
    finds it done; step 2 (the base) then costed by STEP_SECONDS per iteration; a step done before
    is skipped, saying so; the end says how long the job took."""
    env = {"WORKDIR": str(tmp_path), "METHODS": "full", "EXPORT": "0", "STEP_SECONDS": "base=0.5 train=2",
           "SCALE_JOB_START": str(time.time() - 125)}

    def launcher() -> Launcher:
        return Launcher(Settings.from_env(env), Launch.from_env(env), env)

    job = launcher()
    got = job.begin(1)
    err = capsys.readouterr().err
    assert got is not None and got.args[0] == "tools/prepare_demo_data.py"
    # the data (1 step of a kind not timed) and the report; 300 base iterations at 0.5 s, 100 of full at 2 s
    assert "step 1 of 4 · 2 min 05 s so far · at least 5 min 50 s left (3 steps of a kind not timed yet)" in err
    assert (tmp_path / "timings" / "data.start").is_file()
    data = made(job.s, "data").args[-1]
    got = job.begin(2)
    assert got is not None and got.kind == "train" and "step 2 of 4 · " in capsys.readouterr().err
    assert Timings(tmp_path).read()["data"].work == 1 and not (tmp_path / "timings" / "data.start").exists()
    assert (tmp_path / "timings" / "base.start").is_file()
    base = tmp_path / "runs" / "base"
    base.mkdir(parents=True)
    (base / "latest_checkpointed_iteration.txt").write_text("300\n")
    job.finish(2, 0)  # the job ends after the base: its 300 iterations are timed
    assert Timings(tmp_path).read()["base"].work == 300
    # a second run: steps 1 and 2 skipped, saying why
    job = launcher()
    assert job.begin(1) is None
    assert f"skipped, done before: demo corpora ready in {data}" in capsys.readouterr().err
    assert job.begin(2) is None
    assert f"skipped, done before: base trained: {base / 'iter_0000300'}" in capsys.readouterr().err
    assert len(job.todo) == 5  # data, base, full, the held-out bytes and the report
    job.end()
    err = capsys.readouterr().err
    assert "done in 2 min 0" in err and "models" not in err  # EXPORT=0: no models line

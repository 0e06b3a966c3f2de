"""say_error_once: the first rank of a launch prints the line, the others wait until it has."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest

from megatron_scale.training import say_once


@pytest.fixture()
def tmp_marker_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_first_says_it_and_marks_it_said(tmp_marker_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert say_once.say_error_once("bad flag", world_size=2)
    assert say_once.say_error_once("bad flag", world_size=2, wait_s=5) is False  # said: no wait
    assert capsys.readouterr().err == "error: bad flag\n"
    (marker,) = tmp_marker_dir.iterdir()
    assert marker.read_bytes() == say_once.SAID


def test_the_others_wait_for_the_first_to_have_said_it(tmp_marker_dir: Path, capsys: pytest.CaptureFixture) -> None:
    marker = say_once._marker()
    assert marker is not None and marker.startswith(str(tmp_marker_dir))
    Path(marker).touch()  # the first rank has claimed the report and not printed yet
    threading.Timer(0.5, lambda: Path(marker).write_bytes(say_once.SAID)).start()
    start = time.monotonic()
    assert say_once.say_error_once("bad flag", world_size=2, wait_s=10) is False
    assert 0.4 < time.monotonic() - start < 5
    Path(marker).write_bytes(b"")  # a first rank that died before printing: wait_s, then go
    start = time.monotonic()
    assert say_once.say_error_once("bad flag", world_size=2, wait_s=0.3) is False
    assert time.monotonic() - start >= 0.3
    assert capsys.readouterr().err == ""


def test_a_single_process_always_says_it(tmp_marker_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert say_once.say_error_once("x", world_size=1) and say_once.say_error_once("x", world_size=1)
    assert capsys.readouterr().err == "error: x\nerror: x\n" and not list(tmp_marker_dir.iterdir())

"""megatron_scale/launch.py: the ranks a tool spawns (conversion, upscaling, the route sweep,
benchmark scoring) end with the tool. Killing the tool (Ctrl-C, a job's SIGTERM, SIGKILL) used to
leave its ranks computing on as orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def sleeper(path: str, *, device: object) -> int:
    """A rank's work that outlives any test: say which process it is, then sleep."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(300)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_ranks_end_when_the_tool_is_killed(tmp_path: Path) -> None:
    marker = tmp_path / "rank.pid"
    code = ("from megatron_scale.launch import on_ranks; from tests.test_launch import sleeper; "
            f"on_ranks(sleeper, 1, 1, {str(marker)!r})")
    tool = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.is_file() or not marker.read_text():
            assert tool.poll() is None, f"the tool ended early: {tool.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the rank did not start within 120 s"
            time.sleep(0.2)
        rank = int(marker.read_text())
        assert rank != tool.pid and _alive(rank)
        starter = int(Path(f"/proc/{rank}/stat").read_text().split(") ", 1)[1].split()[1])  # the fork server
        tool.send_signal(signal.SIGKILL)
        tool.wait(timeout=30)
        deadline = time.monotonic() + 20
        while (_alive(rank) or _alive(starter)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(rank), "the spawned rank outlived the killed tool by 20 s"
        assert not _alive(starter), f"the process that started the rank ({starter}) outlived the killed tool by 20 s"
    finally:
        if tool.poll() is None:
            tool.kill()
        if marker.is_file() and marker.read_text() and _alive(int(marker.read_text())):
            os.kill(int(marker.read_text()), signal.SIGKILL)


def rank_of(*, device: object) -> str:
    return str(device)


def test_a_port_taken_before_the_ranks_listen_is_chosen_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tools starting at once may be handed the same free port; the one whose rank then cannot
    listen (EADDRINUSE) launches again on another port instead of failing."""
    import socket

    from megatron_scale import launch
    from megatron_scale.distributed import free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [taken.getsockname()[1]]
        chosen: list[int] = []

        def first_taken() -> int:
            chosen.append(ports.pop() if ports else free_port())
            return chosen[-1]

        monkeypatch.setattr(launch, "free_port", first_taken)
        assert len(launch.on_ranks(rank_of, 1, 1)) == 1
        assert len(chosen) == 2 and chosen[0] == taken.getsockname()[1] != chosen[1]


def env_of(name: str, *, device: object) -> tuple[str | None, int, str]:
    import torch

    return os.environ.get(name), torch.get_num_threads(), os.getcwd()


def test_ranks_get_the_callers_environment_as_it_is_when_they_start(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """Ranks forked by the fork server (started once, with the environment of that moment) see the
    caller's environment, thread count and folder of each call, as spawned ranks did."""
    from megatron_scale.launch import on_ranks

    monkeypatch.setenv("MEGATRON_SCALE_TEST_VAR", "first")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert on_ranks(env_of, 1, 1, "MEGATRON_SCALE_TEST_VAR")[0][:2] == ("first", 1)
    monkeypatch.setenv("MEGATRON_SCALE_TEST_VAR", "second")  # the server, if started above, has "first"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.chdir(tmp_path)
    assert on_ranks(env_of, 1, 1, "MEGATRON_SCALE_TEST_VAR") == [("second", 2, str(tmp_path))]


def test_ranks_are_spawned_where_cuda_is_and_forked_from_the_server_where_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from megatron_scale import launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert launch._context().get_start_method() == "spawn"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert launch._context().get_start_method() == "forkserver"

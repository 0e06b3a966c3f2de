"""The Slurm test cluster never outlives its test: SIGKILL the process that started it (what a
timeout does to pytest) and the watchdog (slurm_watchdog.py) ends munged, slurmctld and every
slurmd. No job is submitted: starting the daemons is the whole cost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.examples.slurm_cluster import SlurmUnavailable, ensure_slurm
from tests.examples.slurm_watchdog import start_time

REPO = Path(__file__).resolve().parents[2]
OWNER = """
import json, sys, time
from pathlib import Path
from tests.examples.slurm_cluster import SlurmCluster
c = SlurmCluster(Path(sys.argv[1]), nodes=2, cpus=1)
c.start()
print(json.dumps({"daemons": {n: p.pid for n, p in c.procs.items()}, "watchdog": c.watchdog.pid,
                  "munge": str(c.munge_dir)}), flush=True)
time.sleep(600)
"""


def _gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if start_time(p) is not None]
        if not left:
            return []
        time.sleep(0.2)
    return left


def test_the_watchdog_ends_the_daemons_when_the_test_process_is_killed(tmp_path: Path) -> None:
    try:
        ensure_slurm()
    except SlurmUnavailable as e:
        pytest.skip(f"no Slurm test cluster: {e}")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "cluster")], cwd=REPO, text=True,
                             stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        started = json.loads(owner.stdout.readline() or "{}")  # type: ignore[union-attr]
        assert set(started.get("daemons", {})) == {"munged", "slurmctld", "slurmd-n1", "slurmd-n2"}, started
        daemons = list(started["daemons"].values())
        assert all(start_time(p) for p in daemons)
        owner.send_signal(signal.SIGKILL)  # no teardown runs: only the watchdog is left to act
        owner.wait(timeout=10)
        assert _gone(daemons, timeout=30) == [], "daemons outlived their owner"
        assert _gone([started["watchdog"]], timeout=10) == []
        assert not Path(started["munge"]).exists()
        assert "owner" in (tmp_path / "cluster" / "log" / "watchdog.out").read_text()
    finally:
        if owner.poll() is None:
            owner.kill()


def test_the_watchdog_waits_for_its_owner_and_signals_only_the_daemons_it_recorded(tmp_path: Path) -> None:
    """The watchdog acts only on its owner's end: here the owner (this process) lives, the
    'daemon' (a sleep) stays; a PID file naming a reused PID (another start time) is not signalled."""
    daemon = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])
    pids = tmp_path / "daemons.pids"
    pids.write_text(f"slurmd-n1 {daemon.pid} {start_time(daemon.pid)}\nmunged {other.pid} 1\n")
    me = os.getpid()
    dog = subprocess.Popen([sys.executable, str(REPO / "tests/examples/slurm_watchdog.py"), str(me),
                            str(start_time(me)), str(pids)])
    try:
        time.sleep(1.2)
        assert dog.poll() is None and daemon.poll() is None
        # its owner gone (here: a dead PID stands for it), it ends the daemon and spares the stranger
        dead = subprocess.Popen(["true"])
        dead.wait()
        dog2 = subprocess.run([sys.executable, str(REPO / "tests/examples/slurm_watchdog.py"), str(dead.pid), "0",
                               str(pids)], capture_output=True, text=True, timeout=30)
        assert "ended slurmd-n1" in dog2.stderr
        assert daemon.wait(timeout=5) == -signal.SIGTERM and other.poll() is None
    finally:
        for p in (dog, daemon, other):
            p.kill()

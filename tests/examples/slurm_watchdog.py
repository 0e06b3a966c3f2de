"""The Slurm test cluster's watchdog: a process that outlives its owner (the pytest process that
started the cluster) and stops the cluster's daemons once the owner is gone, however it ended:
a timeout's SIGKILL, a crash, a fixture that failed before its teardown.

    python tests/examples/slurm_watchdog.py OWNER_PID OWNER_START PIDS_FILE [CLEANUP_DIR]

PIDS_FILE lists the daemons, `NAME PID START` a line (START: the process's start time in clock
ticks, /proc/PID/stat field 22, so a PID the kernel reused is never signalled); the cluster
rewrites it as it starts each daemon. Every half second the watchdog checks that OWNER_PID still
runs with OWNER_START. When it does not, each listed daemon still running as recorded gets SIGTERM
(slurmd first, munged last, as SlurmCluster.stop does), SIGKILL 10 s later if still there,
CLEANUP_DIR (munged's socket folder) is removed, and the watchdog exits. The cluster's own stop()
ends the watchdog first (by its PID), then stops the daemons itself. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # from field 3 on; the name in (...) may hold spaces
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has ended; field 22: start time


def _daemons(pids_file: Path) -> list[tuple[str, int, str]]:
    try:
        lines = pids_file.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        name, pid, start = line.split()
        out.append((name, int(pid), start))
    order = {"slurmd": 0, "slurmctld": 1, "munged": 2}
    return sorted(out, key=lambda d: order.get(d[0].split("-")[0], 1))


def _alive(pid: int, start: str) -> bool:
    return start_time(pid) == start


def end_daemons(pids_file: Path, grace: float = 10.0) -> list[str]:
    """SIGTERM every listed daemon still running as recorded, then SIGKILL those left; returns their names."""
    ended = []
    for name, pid, start in _daemons(pids_file):
        if _alive(pid, start):
            os.kill(pid, signal.SIGTERM)
            ended.append(name)
            deadline = time.monotonic() + grace
            while _alive(pid, start) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
    return ended


def main(argv: list[str]) -> int:
    owner, owner_start, pids_file = int(argv[0]), argv[1], Path(argv[2])
    cleanup = Path(argv[3]) if len(argv) > 3 else None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the test's terminal is the owner's to handle
    while start_time(owner) == owner_start:
        time.sleep(0.5)
    ended = end_daemons(pids_file)
    if cleanup is not None:
        shutil.rmtree(cleanup, ignore_errors=True)
    print(f"slurm watchdog: owner {owner} gone; ended {', '.join(ended) or 'nothing (all had stopped)'}",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

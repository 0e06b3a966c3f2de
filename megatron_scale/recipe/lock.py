"""One writer per output: a lock file per recipe action, naming the job that holds it.

Jobs sharing a $WORKDIR (the array tasks of one submission, two submissions, a requeued job and
its replacement) take `$WORKDIR/locks/<action>.lock` before deciding about an action and hold it
while the action runs, so a second job either waits for the one doing it or, once it is released,
finds the output done and skips it. The file is JSON naming its holder: `slurm:<job id>` inside a
Slurm job (an array task's own id), `pid:<host>:<launcher pid>` elsewhere.
The data step locks `$DATA_DIR/locks/<action>.lock` instead when DATA_DIR lies outside
$WORKDIR: jobs of other WORKDIRs share those datasets (Layout.home).

The launcher releases its lock when the action ends and all of them when it exits. A lock left
behind (a job killed outright, a node lost) is stale when its holder is gone: a Slurm job that is
no longer running (finished, unknown to squeue, or pending after a requeue: it is not writing),
this very job (an earlier run of a requeued job), or a process of this host that is not alive.
Where that cannot be told (squeue unreachable, another host's process), the lock counts as held,
and the wait message names the file to delete by hand.

A lock appears with os.link of a complete file (atomic also on NFS), so a reader never sees half
a lock; a stale one is removed under a second, short-lived `.break` lock, and only if it is still
the very lock (same content) that was found stale. Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
"""squeue states of a job that may still be writing (a SUSPENDED job resumes where it was)."""
BREAK_AGE_S = 60.0
"""A `.break` lock older than this was left by a process that died while removing a stale lock."""


def holder_of(env: Mapping[str, str]) -> str:
    """Who this process acts for: the Slurm job, or the launcher's process on this host."""
    job = env.get("SLURM_JOB_ID", "")
    if job:
        return f"slurm:{job}"
    return f"pid:{socket.gethostname()}:{env.get('SCALE_LAUNCHER_PID') or os.getppid()}"


def slurm_job_running(job: str) -> bool | None:
    """Whether a Slurm job is running (None: squeue cannot tell)."""
    try:
        r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60,
                           check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return False if "Invalid job id" in r.stderr else None
    return bool(set(r.stdout.split()) & RUNNING)


def alive(holder: str, me: str, running: Callable[[str], bool | None] = slurm_job_running) -> bool:
    """Whether `holder` may still be writing (True where it cannot be told)."""
    if holder == me:
        return False  # an earlier run of this requeued job, or this launcher itself: ours to take
    kind, _, rest = holder.partition(":")
    if kind == "slurm":
        return running(rest) is not False
    if kind == "pid":
        host, _, pid = rest.rpartition(":")
        if host != socket.gethostname() or not pid.isdigit():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return True


class Locks:
    """The lock files of one work dir, as seen by one holder."""

    def __init__(self, folder: Path, me: str, running: Callable[[str], bool | None] | None = None) -> None:
        self.folder, self.me = Path(folder), me
        self.running = running or (lambda job: slurm_job_running(job))

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.lock"

    def acquire(self, key: str) -> str | None:
        """Take `key`'s lock (or keep it: already ours). None when held by us now, else the live holder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        for _ in range(5):
            if self._link(path, key):
                return None
            text = _read(path)
            if text is None:
                continue  # released meanwhile: try again
            holder = _holder(text)
            if holder == self.me:
                return None
            if alive(holder, self.me, self.running):
                return holder
            self._break(path, text)
        return _holder(_read(path) or "") or "another job"

    def release(self, key: str) -> None:
        path = self.path(key)
        text = _read(path)
        if text is not None and _holder(text) == self.me:
            path.unlink(missing_ok=True)

    def release_all(self) -> None:
        """Every lock we hold here (the launcher's exit, and before its next action)."""
        if self.folder.is_dir():
            for path in self.folder.glob("*.lock"):
                self.release(path.name.removesuffix(".lock"))

    def _link(self, path: Path, key: str) -> bool:
        """Create `path` holding our record, atomically; False if it exists."""
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        record = {"holder": self.me, "key": key, "host": socket.gethostname(), "pid": os.getpid(),
                  "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "token": uuid.uuid4().hex}
        tmp.write_text(json.dumps(record) + "\n")
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # NFS may report a failure of a link that was made: the link count tells
            return tmp.stat().st_nlink == 2
        finally:
            tmp.unlink(missing_ok=True)

    def _break(self, path: Path, stale: str) -> None:
        """Remove `path` if it still is the stale lock `stale`, one breaker at a time."""
        breaker = path.with_name(path.name + ".break")
        if not self._link(breaker, "break"):
            try:
                if time.time() - breaker.stat().st_mtime > BREAK_AGE_S:
                    breaker.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
            time.sleep(0.2)
            return
        try:
            if _read(path) == stale:
                path.unlink(missing_ok=True)
        finally:
            breaker.unlink(missing_ok=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _holder(text: str) -> str:
    try:
        return str(json.loads(text)["holder"])
    except (ValueError, KeyError, TypeError):
        return text.strip() or "unknown"

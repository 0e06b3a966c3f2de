"""One `error:` line per launch, whichever rank fails first.

A bad input may be found on every rank at once (a flag that disagrees with the checkpoint) or on
some (a shard one rank reads). The launcher ends the others as soon as one rank exits, so a line
printed by a fixed rank (rank 0) can be lost when another rank exits first: the user then sees
only torchrun's ChildFailedError report. Here the first rank to fail claims the report with an
exclusive create of a marker file named by the launcher process the local ranks share (torchrun's
agent, srun's step daemon: its pid and start time, so a reused pid names another file) and
torchrun's restart count; it prints, then marks the file said. Every other rank waits, before it
exits, until the file says so (at most `WAIT_S`), so its exit cannot end the first rank before
its line is out. Ranks on other machines each say it once more; where the parent cannot be named
or no temp dir is writable, every rank with the error says it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

WAIT_S = 30.0
SAID = b"said"


def _marker() -> str | None:
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/stat") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]  # field 22, starttime
    except (OSError, IndexError):
        return None
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return os.path.join(tempfile.gettempdir(), f"megatron-scale-error-{parent}-{started}-{restart}")


def _wait_said(marker: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(marker, "rb") as f:
                if f.read() == SAID:
                    return
        except OSError:
            return
        time.sleep(0.05)


def say_error_once(message: str, world_size: int, wait_s: float = WAIT_S) -> bool:
    """Print `error: message` to stderr if this rank is the first of its launch on this machine
    to fail (always when `world_size` is 1); otherwise wait until that rank has printed. Returns
    whether this rank printed."""
    marker = _marker() if world_size > 1 else None
    if marker is None:
        print(f"error: {message}", file=sys.stderr, flush=True)
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        _wait_said(marker, wait_s)
        return False
    except OSError:
        print(f"error: {message}", file=sys.stderr, flush=True)
        return True
    try:
        print(f"error: {message}", file=sys.stderr, flush=True)
        os.write(fd, SAID)
    finally:
        os.close(fd)
    return True

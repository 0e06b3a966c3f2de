"""Named fault points for the kill tests: inert unless the environment arms one.

Production code reaches them only through megatron_scale/hooks.py (point, optimizer_built,
checkpoint_writes), which imports this module only when one of these variables is set:

    MEGATRON_SCALE_FAULT=<point>:<k>[@<rank>]   at the k-th time global rank <rank> (default 0)
                                                reaches <point>, SIGKILL the whole launch
    MEGATRON_SCALE_FAULT_LOG=<file>             the firing rank first appends one JSON line here:
                                                the point, k, rank and what it was doing
    MEGATRON_SCALE_FAULT_COUNT=<dir>            count every point's hits; each rank writes
                                                <dir>/rank<r>.json at exit (what k can be)

The points, in the order a run reaches them (hooks.point calls in the modules named):
    load                a resume has read its checkpoint and is restoring it (training/checkpointing.py)
    forward             a microbatch's forward has run, its backward not yet (training/loop.py)
    optimizer-step      inside the optimizer step: torch's optimizer has updated the parameters
                        (or the main copies), megatron-core has not finished the step
                        (hooks.optimizer_built, training/loop.py)
    save-data           one more tensor written into this rank's shard file of `iter_N.partial`
                        (the file is incomplete until the last one; hooks.checkpoint_writes,
                        checkpoint/io.py)
    save-before-rename  every rank's data is written, `iter_N.partial` not yet renamed (rank 0)
    save-before-marker  `iter_N` complete, `latest_checkpointed_iteration.txt` not yet naming it
                        (rank 0; training/checkpointing.py)
"The whole launch" is what SIGKILL of a node does: under torchrun (TORCHELASTIC_RUN_ID set) the
agent, every process under it and this one; otherwise this process and its children. Nothing here
runs unless one of the variables is set; it reads /proc (Linux).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from megatron_scale.durable import atomic_write

ARM, LOG, COUNT = "MEGATRON_SCALE_FAULT", "MEGATRON_SCALE_FAULT_LOG", "MEGATRON_SCALE_FAULT_COUNT"
POINTS = ("load", "forward", "optimizer-step", "save-data", "save-before-rename", "save-before-marker")


@dataclass
class _Faults:
    rank: int
    point: str | None = None
    k: int = 0
    target_rank: int = 0
    log: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_state: _Faults | None = None
_read = False


def parse(spec: str) -> tuple[str, int, int]:
    """`<point>:<k>[@<rank>]` -> (point, k, rank); a bad one raises naming the variable."""
    where, _, rank = spec.partition("@")
    name, _, k = where.rpartition(":")
    if name not in POINTS or not k.isdigit() or int(k) < 1 or (rank and not rank.isdigit()):
        raise ValueError(f"{ARM}={spec!r}: expected <point>:<k>[@<rank>], k >= 1, point one of {', '.join(POINTS)}")
    return name, int(k), int(rank or 0)


def _faults() -> _Faults | None:
    global _state, _read
    if not _read:
        _read = True
        spec, count = os.environ.get(ARM), os.environ.get(COUNT)
        if spec or count:
            _state = _Faults(rank=int(os.environ.get("RANK", "0")), log=os.environ.get(LOG))
            if spec:
                _state.point, _state.k, _state.target_rank = parse(spec)
            if count:
                atexit.register(_write_counts, count, _state)
    return _state


def active() -> bool:
    return _faults() is not None


def point(name: str, **detail: Any) -> None:
    """One hit of `name`: counted when faults are on; the armed hit kills the launch."""
    f = _faults()
    if f is None:
        return
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}")
    with f.lock:
        n = f.counts[name] = f.counts.get(name, 0) + 1
        if name == f.point and n == f.k and f.rank == f.target_rank:
            _fire(f, name, n, detail)


def _write_counts(directory: str, f: _Faults) -> None:
    atomic_write(os.path.join(directory, f"rank{f.rank}.json"), json.dumps(f.counts))


def _fire(f: _Faults, name: str, n: int, detail: dict[str, Any]) -> None:
    victims = _launch()
    if f.log:
        with open(f.log, "a") as out:
            out.write(json.dumps({"point": name, "k": n, "rank": f.rank, **detail, "victims": victims}) + "\n")
            out.flush()
            os.fsync(out.fileno())
    me = os.getpid()
    for pid in [p for p in victims if p != me]:  # the agent first: it would restart or signal workers
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _under(root: int, tree: dict[int, list[int]]) -> list[int]:
    out, todo = [], [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _launch() -> list[int]:
    """The launch's processes, its root first: the torchrun agent and everything under it, or this
    process and its children. Read before anything dies (a dead parent's children move)."""
    root = os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()
    return [root, *_under(root, _children())]


def inside_optimizer_step(optimizer: Any) -> None:
    """Put the `optimizer-step` point inside megatron-core's step: after each torch optimizer's
    own step (megatron-core chains them), before megatron-core copies or gathers the results."""
    if _faults() is None:
        return
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner.optimizer.register_step_post_hook(lambda *_: point("optimizer-step"))


@contextlib.contextmanager
def checkpoint_writes(directory: str) -> Iterator[None]:
    """While saving into `directory`: a `save-data` point after every tensor megatron-core's
    writer puts into a shard file, naming the file and the bytes written so far."""
    if _faults() is None:
        yield
        return
    from megatron_scale import _mcore as mc

    module = mc.checkpoint_writer_module()
    original = module._write_item

    @functools.wraps(original)  # megatron-core reads its signature
    def write_item(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        stream = next((a for a in args if hasattr(a, "tell") and hasattr(a, "name")), None)
        where = {"file": os.path.basename(str(stream.name)), "bytes": stream.tell()} if stream is not None else {}
        point("save-data", checkpoint=os.path.basename(directory), **where)
        return result

    module._write_item = write_item
    try:
        yield
    finally:
        module._write_item = original

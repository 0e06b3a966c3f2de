"""Spawn N ranks (gloo by default), run one function in each, return what each returned.

    results = run_ranks(fn, 2, arg1, arg2)     # fn(rank, world_size, arg1, arg2) -> picklable

Each rank gets MASTER_ADDR=127.0.0.1, a free port, RANK/WORLD_SIZE/LOCAL_RANK, and the process
group is left to `fn` (megatron_scale.distributed.init_distributed, as the product does it).
A rank that raises fails the call with that rank's traceback; a hung group is killed at the
timeout. Spawning costs ~5-8 s per call on 2 cores (imports), so a test module spawns once and
checks many things per spawn.
"""

from __future__ import annotations

import os
import queue
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

from megatron_scale.launch import on_free_port


def _entry(rank: int, world: int, port: int, fn: Callable, args: tuple, results: Any, received: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
        WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
    )
    try:
        results.put((rank, True, fn(rank, world, *args)))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
    finally:
        received.wait(timeout=600)  # tensors in the queue are served from this process: outlive the read
        try:
            from megatron_scale.distributed import destroy_distributed

            destroy_distributed()
        except Exception:
            pass


def run_ranks(fn: Callable[..., Any], world_size: int = 2, *args: Any, timeout: float = 600) -> list[Any]:
    """Run fn(rank, world_size, *args) in `world_size` spawned processes; per-rank results. A port
    another process took between its choice and rank 0's listen (the other xdist worker starting
    ranks at the same moment: EADDRINUSE, seen in a CI run) is chosen again, twice at most
    (megatron_scale/launch.py on_free_port, as the tools' ranks do)."""
    got, failures = on_free_port(lambda port: _run_ranks_once(fn, world_size, args, timeout, port),
                                 lambda done: any("EADDRINUSE" in f for f in done[1]))
    if failures:
        raise AssertionError("distributed test failed:\n" + "\n".join(failures))
    return [got[r] for r in range(world_size)]


def _run_ranks_once(fn: Callable[..., Any], world_size: int, args: tuple, timeout: float, port: int
                    ) -> tuple[dict[int, Any], list[str]]:
    """One launch on `port`: ({rank: result}, failures)."""
    ctx = mp.get_context("spawn")
    results, received = ctx.Queue(), ctx.Event()
    procs = [
        # not daemonic: dist_checkpointing starts a multiprocessing Manager inside each rank
        ctx.Process(target=_entry, args=(r, world_size, port, fn, args, results, received))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    failures: list[str] = []
    try:
        for _ in procs:
            rank, ok, value = results.get(timeout=timeout)
            if ok:
                got[rank] = value
            else:
                failures.append(f"--- rank {rank} ---\n{value}")
                break  # the other ranks may now hang in a collective
    except queue.Empty:
        failures.append(f"timed out after {timeout} s; ranks that answered: {sorted(got)}")
    finally:
        received.set()
        for p in procs:
            p.join(timeout=5 if failures else 60)
            if p.is_alive():
                p.kill()
    return got, failures

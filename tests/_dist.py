"""Spawn N ranks (gloo by default), run one function in each, return what each returned.

    results = run_ranks(fn, 2, arg1, arg2)     # fn(rank, world_size, arg1, arg2) -> picklable

Each rank gets MASTER_ADDR=127.0.0.1, a free port, RANK/WORLD_SIZE/LOCAL_RANK, and the process
group is left to `fn` (megatron_scale.distributed.init_distributed, as the product does it).
A rank that raises fails the call with that rank's traceback; a hung group is killed at the
timeout. On CPU the ranks are forked from megatron_scale.launch's fork server, which imported
torch and megatron-core once for the whole pytest worker; a spawned rank (CUDA) costs ~5-8 s of
imports on 2 cores, so a test module still starts ranks once and checks many things per start.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any

from megatron_scale.launch import spawn_ranks


def _entry(rank: int, world: int, port: int, fn: Callable, args: tuple, results: Any, received: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
        WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
    )
    try:
        results.put((rank, None, fn(rank, world, *args)))
    except BaseException:
        results.put((rank, traceback.format_exc(), None))
    finally:
        received.wait(timeout=600)  # tensors in the queue are served from this process: outlive the read
        try:
            from megatron_scale.distributed import destroy_distributed

            destroy_distributed()
        except Exception:
            pass


def run_ranks(fn: Callable[..., Any], world_size: int = 2, *args: Any, timeout: float = 600) -> list[Any]:
    """Run fn(rank, world_size, *args) in `world_size` spawned processes; per-rank results. The
    processes start and are collected as the tools' ranks are (megatron_scale/launch.py
    spawn_ranks): a port another process took between its choice and rank 0's listen (the other
    xdist worker starting ranks at the same moment: EADDRINUSE, seen in a CI run) is chosen again,
    twice at most."""
    got, failure = spawn_ranks(_entry, world_size, (fn, args), timeout)
    if failure is not None:
        rank, tb = failure
        said = f"timed out after {timeout} s; ranks that answered: {sorted(got)}" if rank < 0 else f"--- rank {rank} ---\n{tb}"
        raise AssertionError("distributed test failed:\n" + said)
    return [got[r] for r in range(world_size)]

"""Run a step on the ranks of a TP x PP layout: what the tools' work (conversion, upscaling,
benchmark scoring, the route sweep) runs on.

Inside a job that already has a process group (torchrun, srun, a test's spawned ranks), the step
runs right there, on every rank, after megatron-core's parallel state is set to the layout. From a
plain `python tools/...` call it spawns the TP x PP ranks itself on this machine (gloo on CPU,
NCCL where there are enough GPUs) and waits for them. A bad input a rank stops on (a ValueError,
KeyError or CheckpointError) comes back as one RankError with that rank's message, not a wall of
tracebacks; anything else is a RuntimeError with the rank's traceback. The step gets the rank's
device as `device=`: whatever it makes goes there.

`spawn_ranks` starts ranks on this machine and collects what each returns, on a free MASTER_PORT
(here and in the tests' harness, tests/_dist.py).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint.records import CheckpointError
from megatron_scale.distributed import free_port

PORT_TRIES = 3


class RankError(ValueError):
    """A bad input a rank stopped on; the message is the rank's own (naming the file, key or flag)."""


def _rank_entry(rank: int, world: int, port: int, tp: int, pp: int, fn: Callable, args: tuple, parent: int,
                out: Any, received: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    _exit_with_parent(parent)
    from megatron_scale.distributed import destroy_distributed, init_distributed

    try:
        device = init_distributed(tp, pp, device="auto")
        out.put((rank, None, fn(*args, device=device)))
    except Exception as e:  # noqa: BLE001 (forwarded to the parent, which raises once)
        kind = "input" if isinstance(e, CheckpointError | KeyError | ValueError) else "internal"
        out.put((rank, (kind, f"{type(e).__name__}: {e}", traceback.format_exc()), None))
    finally:
        # A tensor in the queue is shared through this process (torch.multiprocessing's file
        # descriptors): stay alive until the caller has taken every result, or it reads a closed
        # descriptor (FileNotFoundError in the resource sharer).
        received.wait(timeout=600)
        destroy_distributed()


def _exit_with_parent(parent: int, poll: float = 1.0) -> None:
    """End this rank when the process that started it is gone (killed: Ctrl-C, a job's SIGTERM or
    SIGKILL to the tool), instead of computing on as an orphan. multiprocessing gives each rank a
    sentinel of its caller (a pipe the caller holds open), spawned or forked by the fork server
    (whose parent is the server, which a rank keeps alive), so the rank waits on that; the sentinel
    is closed already if the caller was killed while this rank started. Without one (a rank not
    started by multiprocessing), the parent pid `parent` is polled."""
    caller = mp.parent_process()

    def watch() -> None:
        if caller is not None:
            caller.join()
        else:
            while os.getppid() == parent:
                time.sleep(poll)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


PRELOAD = ["megatron_scale._mcore", "megatron_scale.distributed", "megatron_scale.model.build",
           "megatron_scale.checkpoint.io"]
"""What the fork server imports once (torch and megatron-core with them): ~5 s of a rank's start."""


def _context() -> Any:
    """How ranks start. Without CUDA: forked from a fork server that has imported PRELOAD once, so
    a rank starts at once instead of importing torch and megatron-core again (~5 s a rank on 2
    cores, paid by every tool call and test that starts ranks); each rank gets the caller's
    environment as it is now (_in_env), not the server's. With CUDA: spawned, so no rank inherits
    a process that may have touched the driver (a forked CUDA context is unusable)."""
    if torch.cuda.is_available():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _in_env(env: dict[str, str], forked: bool, target: Callable, *args: Any) -> None:
    """A rank's start: the caller's environment (a forked rank has the fork server's, taken when
    it started), torch's thread count as OMP_NUM_THREADS says (read when the server imported
    torch), then target(*args)."""
    if forked:
        os.environ.clear()
        os.environ.update(env)
        threads = env.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:
            torch.set_num_threads(int(threads))
    target(*args)


def _spawn_once(ctx: Any, target: Callable, world: int, args: tuple, timeout: float, port: int
                ) -> tuple[dict[int, Any], tuple[int, Any] | None]:
    out, received = ctx.Queue(), ctx.Event()
    forked, env = ctx.get_start_method() == "forkserver", dict(os.environ)
    # not daemonic: dist_checkpointing starts a multiprocessing Manager inside each rank
    procs = [ctx.Process(target=_in_env, args=(env, forked, target, r, world, port, *args, out, received))
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    failure = None
    try:
        for _ in procs:
            rank, why, value = out.get(timeout=timeout)
            if why is not None:
                failure = (rank, why)
                break  # the other ranks may now hang in a collective
            results[rank] = value
    except queue.Empty:
        failure = (-1, None)
    finally:
        received.set()
        for p in procs:
            p.join(timeout=5 if failure else 120)
            if p.is_alive():
                p.kill()
    return results, failure


def spawn_ranks(target: Callable[..., None], world: int, args: tuple, timeout: float
                ) -> tuple[dict[int, Any], tuple[int, Any] | None]:
    """Run target(rank, world, port, *args, out, received) in `world` processes spawned on this
    machine with a MASTER_PORT free on 127.0.0.1, and collect what each puts in `out`:
    (rank, failure, value), failure None for a result. Stops at the first failure or after
    `timeout` s, sets `received` (a rank waits for it before it exits: a tensor in the queue is
    served from its process), ends the processes, and returns ({rank: value}, None), or what came
    and (rank, failure) ((-1, None): the time ran out). A failure that says EADDRINUSE (another
    process took the port before rank 0 listened: two launches at once) launches again on another
    port, PORT_TRIES in all."""
    ctx = _context()
    for attempt in range(PORT_TRIES):
        results, failure = _spawn_once(ctx, target, world, args, timeout, free_port())
        if failure is None or "EADDRINUSE" not in str(failure[1]) or attempt == PORT_TRIES - 1:
            break
    return results, failure


def _spawn(fn: Callable, tp: int, pp: int, args: tuple, timeout: float) -> list[Any]:
    world = tp * pp
    if torch.cuda.is_available() and torch.cuda.device_count() < world:
        raise RankError(
            f"--tensor-model-parallel-size {tp} x --pipeline-model-parallel-size {pp} needs {world} "
            f"GPUs here, found {torch.cuda.device_count()}; launch with torchrun on enough devices"
        )
    results, failure = spawn_ranks(_rank_entry, world, (tp, pp, fn, args, os.getpid()), timeout)
    if failure is not None:
        rank, error = failure
        kind, message, tb = error or ("internal", f"ranks did not finish within {timeout} s", "")
        if kind == "input":
            raise RankError(message.split(": ", 1)[1] if ": " in message else message)
        raise RuntimeError(f"rank {rank} failed: {message}\n{tb}")
    return [results[r] for r in range(world)]


def on_ranks(fn: Callable[..., Any], tp: int, pp: int, *args: Any, timeout: float = 24 * 3600) -> list[Any]:
    """fn(*args, device=<the rank's device>) on every rank of a TP x PP layout; returns the results
    (this rank's only, in a one-element list, when called inside an existing process group).
    Results travel to the caller through a queue: return host tensors."""
    if dist.is_initialized():
        world = dist.get_world_size()
        if world % (tp * pp):
            raise RankError(
                f"world size {world} is not a multiple of --tensor-model-parallel-size {tp} x "
                f"--pipeline-model-parallel-size {pp}"
            )
        mc.parallel_state.destroy_model_parallel()
        mc.parallel_state.initialize_model_parallel(tp, pp)
        from megatron_scale.distributed import run_device

        return [fn(*args, device=run_device())]
    return _spawn(fn, tp, pp, args, timeout)

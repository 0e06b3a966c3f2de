"""The one hook: where the test machinery (megatron_scale/testing/) reaches into production code.

Production modules call these and nothing else of that machinery; each is inert unless the
environment switches the machinery on, and only then is megatron_scale.testing imported (this is
the only production module that imports it: tests/test_layering.py holds that):

    point(name, **detail)          a named moment of a run that the kill tests stop at
    optimizer_built(optimizer)     lets them stop inside the optimizer's step, too
    checkpoint_writes(directory)   (a context) and inside a checkpoint's shard writes
        -- all three on with MEGATRON_SCALE_FAULT / _FAULT_COUNT (testing/faults.py lists the
           points and the variables)
    device_audit(emulated)         the CPU backend's device audit (testing/device_audit.py), on
                                   with the backend unless MEGATRON_SCALE_DEVICE_AUDIT=0: returns
                                   its per-call check, or None
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

# The switches (the same names as testing/faults.py ARM and COUNT; tests/test_layering.py checks):
FAULT = "MEGATRON_SCALE_FAULT"
"""<point>:<k>[@<rank>]: SIGKILL the launch at the k-th hit of <point> on <rank>."""
FAULT_COUNT = "MEGATRON_SCALE_FAULT_COUNT"
"""A directory where each rank writes its hits of every point at exit."""
DEVICE_AUDIT = "MEGATRON_SCALE_DEVICE_AUDIT"
"""0 turns the CPU backend's device audit off (it is on by default)."""


def _faults() -> Any:
    """testing/faults.py where the environment arms or counts fault points, else None."""
    if not (os.environ.get(FAULT) or os.environ.get(FAULT_COUNT)):
        return None
    from megatron_scale.testing import faults

    return faults


def point(name: str, **detail: Any) -> None:
    """A named moment of a run (testing/faults.py POINTS): a no-op unless fault points are on."""
    faults = _faults()
    if faults is not None:
        faults.point(name, **detail)


def optimizer_built(optimizer: Any) -> None:
    """The run's optimizer exists: fault points may put one inside its step."""
    faults = _faults()
    if faults is not None:
        faults.inside_optimizer_step(optimizer)


@contextlib.contextmanager
def checkpoint_writes(directory: str) -> Iterator[None]:
    """While a checkpoint is written into `directory`: fault points may stop between its writes."""
    faults = _faults()
    if faults is None:
        yield
        return
    with faults.checkpoint_writes(directory):
        yield


def device_audit(emulated: Any) -> Callable[..., Any] | None:
    """Switch the device audit on for a CPU-backend run whose device stand-in is `emulated`, unless
    MEGATRON_SCALE_DEVICE_AUDIT=0; returns its check of one torch call (audited_call) or None."""
    if os.environ.get(DEVICE_AUDIT, "1") == "0":
        return None
    from megatron_scale.testing import device_audit as audit

    audit.enable(emulated)
    return audit.audited_call

"""The step audit: what a training step writes besides its math, and where it waits for the host.

A `TorchDispatchMode` sees every aten call of the code run under it, forward and backward alike
(autograd's own ops included: the zero-filled gradient of a slice, the split of a concatenation's
gradient). It keeps two tallies:

    copies   bytes written by ops that move data without computing: copy_, cat, clone (what
             .contiguous() is), the zero-fills (zeros, zero_, fill_, new_zeros) and the scatter
             a slice's backward is (slice_backward, select_backward, slice_scatter, ...), by op
    syncs    ops whose result the host must wait for: .item() (_local_scalar_dense), nonzero,
             equal, is_nonzero, and any copy to the host; each with the Python frame that asked

On a GPU each copy is a kernel and each sync an idle device; under CUDA graphs a sync inside the
captured step is an error. The audit runs on the CPU, so it counts what the code asks for, never
how long it takes: a regression test of the copies that autograd and layouts add, and of the
host syncs that stop whole-iteration graphs (tests/model/test_step_audit.py).

Views (view, slice, transpose, as_strided, ...) write nothing and are not counted; neither are
the GEMMs, norms and elementwise kernels, whose bytes are the step's work.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten

COPY_OPS = frozenset({
    "copy_", "copy", "_to_copy", "cat", "clone", "_unsafe_view_copy", "contiguous",
    "stack", "slice_backward", "select_backward", "slice_scatter", "select_scatter", "narrow_copy",
    "index_put_", "index_put", "_index_put_impl_", "new_zeros", "zeros", "zeros_like", "zero_", "fill_",
    "new_full", "full", "full_like", "masked_scatter_", "split_with_sizes_copy", "as_strided_scatter",
})
"""aten ops (by their overload packet's name) that only move or fill data."""

SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "equal", "is_nonzero", "item"})
"""aten ops whose result the host waits for on a GPU."""


def _name(func: Any) -> str:
    return func.overloadpacket.__name__


def _bytes(out: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(out) if isinstance(t, torch.Tensor))


_SKIP = {__file__, __file__.replace("testing/step_audit.py", "cpu_backend.py"),
         __file__.replace("step_audit.py", "device_audit.py")}
"""Frames that only pass calls through (the CPU backend maps torch calls to the host)."""


_uncounted = [0]
"""Depth of `kernel_writes` regions."""


@contextmanager
def kernel_writes() -> Iterator[None]:
    """Copies made here stand for a kernel writing its result where it was told (a test stand-in
    of a fused kernel's `out=`): not counted, since the kernel itself copies nothing."""
    _uncounted[0] += 1
    try:
        yield
    finally:
        _uncounted[0] -= 1


def _caller() -> str:
    """Who asked for the op: the backward node running it (autograd's own ops name no Python
    frame of their own), else the innermost frame outside torch and the pass-through files."""
    node = torch._C._current_autograd_node()
    if node is not None:
        return f"backward of {node.name()}"
    for frame in reversed(traceback.extract_stack()):
        f = frame.filename
        if "/torch/" in f or f in _SKIP:
            continue
        return f"{f}:{frame.lineno} ({frame.name})"
    return "?"


@dataclass
class Audit:
    """What one audited region did (see the module docstring)."""

    copy_bytes: Counter = field(default_factory=Counter)
    """Bytes written per copy/fill op name."""
    copy_calls: Counter = field(default_factory=Counter)
    """Calls per copy/fill op name."""
    syncs: list[tuple[str, str]] = field(default_factory=list)
    """(op name, the frame that asked) of each host sync."""
    copy_sites: Counter = field(default_factory=Counter)
    """Bytes written per (op name, frame): where the copies come from (with `sites=True`)."""

    @property
    def total_copy_bytes(self) -> int:
        return sum(self.copy_bytes.values())

    def summary(self, top: int = 8) -> str:
        """One line per largest copy site (or op), for an assertion message."""
        rows = self.copy_sites.most_common(top) if self.copy_sites else self.copy_bytes.most_common(top)
        lines = [f"copies {self.total_copy_bytes} B in {sum(self.copy_calls.values())} calls; syncs {len(self.syncs)}"]
        lines += [f"  {v:>12d} B  {k}" for k, v in rows]
        lines += [f"  sync {op} at {where}" for op, where in self.syncs[:top]]
        return "\n".join(lines)


class _AuditMode(TorchDispatchMode):
    def __init__(self, audit: Audit, sites: bool) -> None:
        super().__init__()
        self.audit = audit
        self.sites = sites

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = _name(func)
        if name in COPY_OPS and not _uncounted[0]:
            # In-place fills and copies write their first argument, an indexed write its values;
            # the others their result.
            if name in ("index_put_", "_index_put_impl_", "index_put", "masked_scatter_"):
                n = _bytes(args[2] if name != "masked_scatter_" else args[1])
            else:
                n = _bytes(args[0] if name.endswith("_") and args else out)
            if name in ("copy_", "_to_copy") and _to_host(args, out):
                self.audit.syncs.append((f"{name} to the host", _caller()))
            self.audit.copy_bytes[name] += n
            self.audit.copy_calls[name] += 1
            if self.sites:
                self.audit.copy_sites[f"{name} at {_caller()}"] += n
        elif name in SYNC_OPS:
            self.audit.syncs.append((name, _caller()))
        return out


def _to_host(args: tuple, out: Any) -> bool:
    """A copy from a device tensor into host memory (never true on a CPU-only run)."""
    src = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else args[0] if args else None
    dst = args[0] if isinstance(out, torch.Tensor) and args and out is args[0] else out
    return (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
            and src.device.type != "cpu" and dst.device.type == "cpu")


@contextmanager
def step_audit(*, sites: bool = False) -> Iterator[Audit]:
    """Audit everything run inside: `with step_audit() as a: step(); a.total_copy_bytes`.
    `sites`: also tally bytes per calling frame (slower: a stack walk per copy)."""
    audit = Audit()
    with _AuditMode(audit, sites):
        yield audit


def audited(fn: Any, *args: Any, sites: bool = False, **kwargs: Any) -> tuple[Any, Audit]:
    """fn(*args, **kwargs) under the audit: (its result, the audit)."""
    with step_audit(sites=sites) as a:
        out = fn(*args, **kwargs)
    return out, a


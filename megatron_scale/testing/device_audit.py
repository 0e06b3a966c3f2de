"""The device audit: on the CPU backend, catch the tensor a GPU run would find on the wrong device.

Test machinery: it patches torch process-wide (enable), so it lives here, switched on only through
megatron_scale/hooks.py device_audit, which the CPU backend calls when it is enabled.

The CPU backend (cpu_backend.py) runs megatron-core on the CPU by mapping every CUDA request to
the CPU. Left alone, that hides device bugs: a batch never moved to the GPU, or a collective's
buffer left on the host, works on the CPU and crashes on the first GPU step. The audit keeps the
distinction the mapping erases. Every tensor made while it is on is tagged with where the code
*placed* it:

    run's device   the run's device was named: a CUDA device (device="cuda", .cuda(), .to(device),
                   torch.cuda.current_device()) or the CPU backend's stand-in for it
                   (cpu_backend.DEVICE, cpu:0, what init_distributed returns there), or the .device of such a tensor
    host           no device was named (torch.tensor(...), torch.zeros(n), torch.from_numpy, a
                   numpy batch stacked), or the host was: "cpu", .cpu(), .pin_memory()

and tags flow through every torch call (a result is on the device if an input is). Two things
raise `DeviceAuditError`, naming where the host tensor was made and where it was used:
  - a torch call that mixes a host tensor (not a 0-dim scalar) with tensors on the device (moves
    and indexing are exempt: .to, .copy_, [...]);
  - a host tensor handed to a collective of a device group (the default group and every group
    not created with backend="gloo": NCCL groups on a GPU).
Tensors the audit never saw made (autograd's gradients, torch.load's) are untagged and pass.
It is on with the CPU backend unless MEGATRON_SCALE_DEVICE_AUDIT=0.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

_TAG = "_megatron_scale_placed"
DEVICE = "the run's device"
_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN = {__file__, os.path.join(os.path.dirname(os.path.dirname(__file__)), "cpu_backend.py")}
_COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv",
    "_all_gather_base", "_reduce_scatter_base",
)  # not isend/irecv: torch's P2POp accepts only the originals (megatron's pipeline uses those)
_emulated: torch.device | None = None  # the CPU backend's stand-in for the run's device (enable)
_host_groups: set[int] = set()
_enabled = False


class DeviceAuditError(RuntimeError):
    """A host tensor met the run's device: this code would fail on a GPU."""


def placement(t: torch.Tensor) -> str | None:
    """DEVICE, 'host (<origin>)', or None where the audit never saw the tensor made."""
    return getattr(t, _TAG, None)


def _short(path: str) -> str:
    for marker in ("site-packages" + os.sep, os.sep + "megatron_scale" + os.sep, os.sep + "tests" + os.sep,
                   os.sep + "tools" + os.sep):
        i = path.rfind(marker)
        if i >= 0:
            return path[i + len(marker):] if marker.startswith("site") else path[i + 1:]
    return path


def _is_project(path: str) -> bool:
    return any(os.sep + d + os.sep in path for d in ("megatron_scale", "tests", "tools", "examples"))


def _caller() -> str:
    """Where the code made or used a tensor: the first frame outside torch and the audit, and
    the first of this project's frames above it if that is another (megatron-core called from ours)."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_TORCH_DIR) or f.f_code.co_filename in _OWN):
        f = f.f_back
    if f is None:
        return "?"
    here = f"{_short(f.f_code.co_filename)}:{f.f_lineno}"
    up, hops = f, 0
    while up is not None and hops < 20 and not _is_project(up.f_code.co_filename):
        up, hops = up.f_back, hops + 1
    if up is None or up is f or not _is_project(up.f_code.co_filename):
        return here
    return f"{_short(up.f_code.co_filename)}:{up.f_lineno} (in {here})"


def _name(func: Callable) -> str:
    """torch.tensor, torch.nn.functional.embedding, Tensor.cpu, ... as a user would write it."""
    name = getattr(func, "__name__", repr(func))
    qual = getattr(func, "__qualname__", name)
    owner = qual.rsplit(".", 1)[0] if "." in qual else ""
    if "Tensor" in owner:
        return f"Tensor.{name}"
    module = getattr(func, "__module__", None) or "torch"
    if owner == "_VariableFunctionsClass" or module.startswith("torch._C"):
        module = "torch"
    return f"{module}.{name}"


def _tensors(args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b


def _spec_placement(spec: Any) -> str | None:
    """DEVICE or 'host' for a device argument; None for what is not one (a dtype, meta)."""
    if isinstance(spec, bool):
        return None
    if isinstance(spec, int):  # a CUDA ordinal
        return DEVICE
    if isinstance(spec, str):
        spec = torch.device(spec) if spec.split(":")[0] in ("cpu", "cuda") else None
    if not isinstance(spec, torch.device):
        return None
    if spec.type == "cuda" or (spec.type == "cpu" and spec.index is not None):
        return DEVICE
    return "host" if spec.type == "cpu" else None


def _explicit(func: Callable, args: tuple, kwargs: dict) -> str | None:
    """The placement a call asks for by itself, or None if its result follows its inputs."""
    if func is torch.Tensor.cuda:
        return DEVICE
    if func is torch.Tensor.cpu or func is torch.Tensor.pin_memory:
        return "host"
    if kwargs.get("device") is not None:
        return _spec_placement(kwargs["device"])
    if func is torch.Tensor.to:
        for a in args[1:]:
            if isinstance(a, torch.Tensor):
                return placement(a)
            found = _spec_placement(a)
            if found is not None:
                return found
    return None


_EXEMPT = {  # moves between host and device, and indexing (a CUDA tensor takes CPU indices)
    torch.Tensor.to, torch.Tensor.copy_, torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.__getitem__,
    torch.Tensor.__setitem__, torch.Tensor.index_put_, torch.Tensor.index_put,
}


_QUERIES = {"_has_compatible_shallow_copy_type"}  # compares two tensors' types, moves nothing


def _host_tag(maker: str) -> str:
    """The tag of a host tensor: what made it and where (the audit's messages quote it)."""
    return f"host tensor (made by {maker} at {_caller()})"


def _tag(out: Any, tag: str) -> None:
    if isinstance(out, torch.Tensor):
        setattr(out, _TAG, tag)
    elif isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, torch.Tensor):
                setattr(o, _TAG, tag)


def audited_call(func: Callable, args: tuple, kwargs: dict, call: Callable[[], Any]) -> Any:
    """Run `call` (the torch function with its arguments, already mapped to the CPU), checking
    and propagating placement tags. `func`, `args`, `kwargs` are the call as the code wrote it."""
    name = getattr(func, "__name__", "")
    if name == "__get__":  # a property: .data, .T, .grad, ... follow their tensor
        if getattr(getattr(func, "__self__", None), "__name__", None) == "device" and args:
            # .device of a tensor on the run's device names the run's device, so that
            # torch.zeros(..., device=t.device) lands where t is
            if placement(args[0]) is DEVICE and args[0].device.type == "cpu":
                return _emulated
        out = call()
        if isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
            tag = placement(args[0])
            if tag is not None and placement(out) is None:
                setattr(out, _TAG, tag)
        return out
    if name == "__set__":  # param.data = x: the parameter takes x's placement
        out = call()
        if len(args) == 2 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor):
            tag = placement(args[1])
            if tag is not None:
                setattr(args[0], _TAG, tag)
        return out
    explicit = _explicit(func, args, kwargs)
    on_device = False
    host: str | None = None
    seen = False
    for t in _tensors(args, kwargs):
        seen = True
        tag = getattr(t, _TAG, None)
        if tag is DEVICE:
            on_device = True
        elif tag is not None and host is None and t.dim() > 0:
            host = tag
    if on_device and host is not None and func not in _EXEMPT and name not in _QUERIES:
        raise DeviceAuditError(
            f"device audit: {_name(func)} at {_caller()} mixes a {host} with tensors on the run's "
            f"device; on a GPU this fails (tensors on different devices). Move it to the run's "
            f"device where it is made."
        )
    out = call()
    if explicit == "host":
        tag = _host_tag(_name(func))
        if out is args[0] and placement(out) is DEVICE:  # .cpu() of a CPU tensor returns itself
            if out.requires_grad and out.is_leaf:
                return out
            out = out.view_as(out)
    elif explicit is not None:
        tag = explicit
    elif on_device:
        tag = DEVICE
    elif host is not None:
        tag = host
    elif not seen:
        tag = _host_tag(_name(func))
    else:
        return out
    _tag(out, tag)
    return out


def _from_numpy(array: Any) -> torch.Tensor:
    t = _orig_from_numpy(array)
    setattr(t, _TAG, _host_tag("torch.from_numpy"))
    return t


def _parameter_new(cls: type, data: torch.Tensor | None = None, requires_grad: bool = True) -> Any:
    p = _orig_parameter_new(cls, data, requires_grad)
    tag = placement(data) if isinstance(data, torch.Tensor) else None
    if tag is not None:
        setattr(p, _TAG, tag)
    return p


def _new_group(*args: Any, **kwargs: Any) -> Any:
    group = _orig_new_group(*args, **kwargs)
    backend = kwargs.get("backend")
    if backend is not None and str(backend).lower() == "gloo":
        _host_groups.add(id(group))
    return group


def _check_collective(name: str, orig: Callable) -> Callable:
    signature = inspect.signature(orig)

    @functools.wraps(orig)
    def checked(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs).arguments
        group = bound.get("group")
        if group is None or id(group) not in _host_groups:
            for t in _tensors(tuple(v for k, v in bound.items() if k != "group"), {}):
                tag = placement(t)
                if tag is not None and tag is not DEVICE:
                    raise DeviceAuditError(
                        f"device audit: torch.distributed.{name} at {_caller()} got a {tag}; its group "
                        f"is a device group (NCCL on a GPU), which refuses host tensors. Allocate it on "
                        f"the run's device."
                    )
        return orig(*args, **kwargs)

    return checked


def _getstate(self: torch.Tensor) -> Any:
    """A pickled tensor (a checkpoint's common state, the RNG and optimizer step it saves) leaves
    the tag behind: it says where this process placed the tensor, not where a loader will, and it
    would make two saves of the same state differ byte for byte."""
    state = _orig_getstate(self)
    if isinstance(state, dict) and _TAG in state:
        return {k: v for k, v in state.items() if k != _TAG}
    if isinstance(state, tuple) and state and isinstance(state[0], dict) and _TAG in state[0]:
        return ({k: v for k, v in state[0].items() if k != _TAG}, *state[1:])
    return state


_orig_getstate = torch.Tensor.__getstate__
_orig_from_numpy = torch.from_numpy
_orig_parameter_new = torch.nn.Parameter.__new__
_orig_new_group = dist.new_group


def enable(emulated: torch.device) -> None:
    """Install the audit's hooks (from_numpy, Parameter, new_group, the collectives, pickling
    without the tag) for a CPU backend whose stand-in for the run's device is `emulated` (a CPU
    named apart from "cpu"). Idempotent.
    The per-call checks run inside the CPU backend's torch-function mode (audited_call)."""
    global _enabled, _emulated
    if _enabled:
        return
    _emulated = emulated
    torch.from_numpy = _from_numpy  # type: ignore[assignment]  # the audit patches torch while armed, restored by disable()
    torch.Tensor.__getstate__ = _getstate  # type: ignore[method-assign,assignment]  # the audit patches torch while armed, restored by disable()
    torch.nn.Parameter.__new__ = staticmethod(_parameter_new)  # type: ignore[method-assign,assignment]  # the audit patches torch while armed, restored by disable()
    dist.new_group = _new_group  # type: ignore[assignment]  # the audit patches torch while armed, restored by disable()
    for name in _COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _check_collective(name, getattr(dist, name)))
    _enabled = True

"""Global (TP/PP-independent) state dicts of a sharded model, in checkpoint keys.

A model's `sharded_state_dict()` is the one statement of which rank holds which piece of which
global tensor. These helpers use it in both directions, in memory:

    global_state_dict(model)           every rank's shards gathered into full tensors
    load_global_state_dict(model, sd)  each rank cuts its shards out of full tensors
    sharded_tensors(model[, sharded])  this rank's ShardedTensors (factories built)
    tree_map / leaves                  the one walker of nested state dicts

Keys are dist_checkpointing keys (layers stacked on a leading axis, as megatron-core saves them):
the same names a torch_dist checkpoint holds, so `upscale`, conversion and tests speak one layout.
Gathering moves the whole model through all_gather_object: meant for tests, tools and small models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """`tree` rebuilt with `fn` applied to each leaf: nested dicts and lists are walked (a sharded
    state dict's containers, as megatron-core walks them), anything else is a leaf."""
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [tree_map(fn, v) for v in tree]
    return fn(tree)


def leaves(tree: Any) -> Iterator[Any]:
    """Every leaf of nested dicts, lists and tuples."""
    if isinstance(tree, dict):
        for v in tree.values():
            yield from leaves(v)
    elif isinstance(tree, list | tuple):
        for v in tree:
            yield from leaves(v)
    else:
        yield tree


def _index(st: Any) -> tuple:
    """Where a ShardedTensor's local data sits inside its global tensor."""
    pre = st.prepend_axis_num
    return tuple(st.global_offset[:pre]) + tuple(
        slice(o, o + s) for o, s in zip(st.global_offset[pre:], st.local_shape, strict=True)
    )


def built_sharded_state_dict(model: mc.MegatronModule) -> tuple[dict, dict]:
    """(sharded state dict with factories applied, the factories by top-level key)."""
    ssd = model.sharded_state_dict()
    factories = {k: v for k, v in ssd.items() if isinstance(v, mc.ShardedTensorFactory)}
    mc.apply_factories(ssd)
    return ssd, factories


def _build(leaf: Any) -> Any:
    return leaf.build() if isinstance(leaf, mc.ShardedTensorFactory) else leaf


def sharded_tensors(model: mc.MegatronModule, sharded: dict | None = None) -> Iterator[tuple[str, Any]]:
    """(state-dict key, ShardedTensor) for every tensor shard this rank holds. `sharded`: the
    model's sharded state dict, already built by the caller (it is left as it is: factories are
    built on the side, so dist_checkpointing can still save or load it)."""
    ssd = model.sharded_state_dict() if sharded is None else sharded
    for k, v in ssd.items():
        for leaf in leaves(tree_map(_build, v)):
            if isinstance(leaf, mc.ShardedTensor):
                yield k, leaf


def global_state_dict(model: mc.MegatronModule, group: dist.ProcessGroup | None = None) -> dict[str, torch.Tensor]:
    """Full tensors by checkpoint key, identical on every rank of `group` (default: world)."""
    mine = [
        (st.key, tuple(st.global_shape), _index(st), st.data.detach().cpu().clone())
        for _, st in sharded_tensors(model)
    ]
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        every: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(every, mine, group=group)
    else:
        every = [mine]
    out: dict[str, torch.Tensor] = {}
    for shards in every:
        for key, shape, index, data in shards:
            if key not in out:
                out[key] = torch.empty(shape, dtype=data.dtype)
            out[key][index] = data
    return out


def load_global_state_dict(model: mc.MegatronModule, state: dict[str, torch.Tensor], strict: bool = True) -> list[str]:
    """Load full tensors into this rank's shards. Returns the checkpoint keys not found in
    `state` (an error when strict). Shapes must match the model's global shapes exactly."""
    ssd, factories = built_sharded_state_dict(model)
    missing: list[str] = []

    def cut(leaf: Any) -> Any:
        if not isinstance(leaf, mc.ShardedTensor):
            return leaf
        if leaf.key not in state:
            missing.append(leaf.key)
            return None
        full = state[leaf.key]
        if tuple(full.shape) != tuple(leaf.global_shape):
            raise ValueError(
                f"checkpoint key {leaf.key!r}: shape {tuple(full.shape)} does not match the "
                f"model's {tuple(leaf.global_shape)}"
            )
        return full[_index(leaf)]

    loaded = {k: tree_map(cut, v) for k, v in ssd.items()}
    if missing and strict:
        raise KeyError(f"state dict lacks {len(missing)} key(s), first: {sorted(set(missing))[:5]}")
    complete = {
        k: v for k, v in loaded.items() if not any(leaf is None for leaf in leaves(v))
    }
    for k, f in factories.items():
        if k in complete:
            complete[k] = f.merge_fn(complete[k])
    complete = {k: v for k, v in complete.items() if isinstance(v, torch.Tensor)}
    result = model.load_state_dict(complete, strict=False)
    # Transformer Engine modules' `_extra_state` (FP8 scaling state) is no weight: a base
    # checkpoint has none, and the module keeps its own.
    unloaded = [k for k in result.missing_keys if not k.endswith("_extra_state")]
    if strict and unloaded:
        raise KeyError(f"model keys not loaded: {unloaded[:5]}")
    return sorted(set(missing))

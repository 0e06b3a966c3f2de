"""A digest of the frozen base that does not depend on how the model is sharded.

Checkpoints record it at save and verify it at load, so a corrupted or swapped base is caught
even after resharding (saved at TP=2, loaded at TP=1). Each rank hashes only the shards it owns
(main replicas), element by element with the element's global position and its tensor's key,
and the per-key sums are all-reduced: the result is the same for any TP/PP/DP layout.

Per element, with a = raw bits (32 low bits), i = global flat index, M = 2^31 - 1:
    h1 = (a P1 + (i mod 2^32) P2 + (i >> 32) P3 + s) mod M,    h2 = h1^2 mod M
and the digest is SHA-256 over (key, sum h1, sum h2, numel) for every frozen key in order. Every
product stays below 2^63, so nothing relies on integer overflow. It is a checksum against
accidents (a changed, moved or missing value), not a defence against a forger. The sums live on
the device the all-reduce's group serves, which the caller passes (io.py: distributed.py's
collective_device, the GPU for NCCL); by default the model's own.
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.model.weights.state import sharded_tensors

_M = 2**31 - 1
_P1, _P2, _P3 = 1_000_003, 998_244_353 % _M, 754_974_721 % _M
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _is_main_replica(replica_id: int | tuple[int, ...]) -> bool:
    if isinstance(replica_id, int):
        return replica_id == 0
    return all(r == 0 for r in replica_id)


def _salt(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") % _M


def _partial_sums(st: mc.ShardedTensor, chunk_rows: int = 1 << 16) -> torch.Tensor:
    data = st.data.detach()
    device = data.device
    bits = data.contiguous().view(_BITS[data.element_size()]).to(torch.int64) & 0xFFFFFFFF
    pre = st.prepend_axis_num
    gshape = st.global_shape
    goff = st.global_offset
    strides = [1] * len(gshape)
    for axis in range(len(gshape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * gshape[axis + 1]
    base = sum(goff[i] * strides[i] for i in range(pre))
    idx = torch.full((), base, dtype=torch.int64, device=device)
    for dim, (off, size) in enumerate(zip(goff[pre:], data.shape, strict=True)):
        shape = [1] * data.dim()
        shape[dim] = size
        idx = idx + ((torch.arange(size, dtype=torch.int64, device=device) + off) * strides[pre + dim]).view(shape)
    idx = idx.expand(data.shape).reshape(-1)
    bits = bits.reshape(-1)
    salt = _salt(st.key)
    total = torch.zeros(3, dtype=torch.int64, device=device)
    for start in range(0, bits.numel(), chunk_rows * 64):
        a = bits[start : start + chunk_rows * 64]
        i = idx[start : start + chunk_rows * 64]
        h1 = (a * _P1 % _M + (i & 0xFFFFFFFF) * _P2 % _M + (i >> 32) * _P3 % _M + salt) % _M
        h2 = h1 * h1 % _M
        total[0] += h1.sum()
        total[1] += h2.sum()
        total[2] += a.numel()
    return total


def frozen_base_digest(model: nn.Module, group: dist.ProcessGroup | None = None, *, sharded: dict | None = None,
                       device: torch.device | None = None) -> str:
    """SHA-256 hex digest of every frozen tensor of `model`, identical at any parallel layout.
    `sharded`: the model's sharded state dict where the caller has built it already (a save or
    load), so it is not built twice; it is not modified. `device`: where the sums meet in the
    all-reduce over `group` (the device its collectives take; None: the model's)."""
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    reduce = dist.is_initialized() and dist.get_world_size(group) > 1
    if reduce and device is None:
        device = next(model.parameters()).device
    device = device if reduce else None
    sums: dict[str, torch.Tensor] = {}
    for state_key, st in sharded_tensors(model, sharded):
        if state_key not in frozen:
            continue
        acc = sums.setdefault(st.key, torch.zeros(3, dtype=torch.int64, device=device or st.data.device))
        if _is_main_replica(st.replica_id):
            acc += _partial_sums(st).to(acc.device)
    keys = sorted(sums)
    if reduce:
        # Every rank must contribute the same key list: gather the union first (PP stages differ).
        every: list[list[str]] = [[] for _ in range(dist.get_world_size(group))]
        dist.all_gather_object(every, keys, group=group)
        keys = sorted({k for ks in every for k in ks})
        stacked = torch.zeros(len(keys), 3, dtype=torch.int64, device=device)
        for row, k in enumerate(keys):
            if k in sums:
                stacked[row] = sums[k]
        dist.all_reduce(stacked, group=group)
        sums = dict(zip(keys, stacked, strict=True))
    values = {k: v.tolist() for k, v in sums.items()}  # one host copy per key, after the reduce
    h = hashlib.sha256()
    for k in keys:
        h.update(k.encode() + b"\0" + ",".join(str(int(v)) for v in values[k]).encode() + b"\n")
    return h.hexdigest()

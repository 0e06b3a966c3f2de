"""Split RMSNorm: the original d dims and the new d' dims are normalised apart.

    norm([x; x_up]) = [ rms_norm(x) * g ; rms_norm(x_up) * g_up ]     g [d] frozen, g_up [d'] = 1

One RMSNorm over all d + d' dims would let x_up change the statistic of x, and with it the base
path. Here the base half is the very call megatron-core's local RMSNorm makes (torch.nn.RMSNorm
-> F.rms_norm) on the base dims, so the base path is bitwise that of the base model.

Unlike megatron-core's torch norm, it supports sequence parallelism: its gains carry the
`sequence_parallel` attribute, so finalize_model_grads all-reduces their partial gradients.

`skip_base_grad` (the base stream's backward skipped, fused.py): the base half is normalised
without autograd (the same call, so the same values; no statistics kept for a backward) and its
gradient is zero; the new half keeps a copy of its own input for its backward instead of a view,
so the layer's whole residual-stream input is not kept alive for the d' features that need it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.model.layers.partition import dp_group, param_device


class SplitRMSNorm(nn.Module):
    """Split RMSNorm over [.., d + d'] (replicated over TP; no shard axis)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, *, base_hidden: int,
                 skip_base_grad: bool = False) -> None:
        super().__init__()
        if not 0 < base_hidden < hidden_size:
            raise ValueError(f"SplitRMSNorm: base_hidden={base_hidden} must lie in (0, {hidden_size})")
        self.config = config
        self.eps = eps
        self.base_hidden = base_hidden
        self.skip_base_grad = skip_base_grad
        kw = {"dtype": config.params_dtype, "device": param_device(config)}
        self.weight = nn.Parameter(torch.ones(base_hidden, **kw), requires_grad=False)
        self.weight_up = nn.Parameter(torch.ones(hidden_size - base_hidden, **kw))
        self.weight.scale_frozen = True  # type: ignore[attr-defined]  # our parameter tag (Tensor declares none)
        for p in (self.weight, self.weight_up):
            p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        d = self.base_hidden
        up = hidden[..., d:]
        if self.skip_base_grad:
            with torch.no_grad():
                x = F.rms_norm(hidden[..., :d], (d,), self.weight, self.eps)
            if up.requires_grad:
                up = up.contiguous()
        else:
            x = F.rms_norm(hidden[..., :d], (d,), self.weight, self.eps)
        x_up = F.rms_norm(up, (hidden.shape[-1] - d,), self.weight_up, self.eps)
        return torch.cat((x, x_up), dim=-1)

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> dict:
        """Both gains replicated across TP (explicit empty axis map)."""
        return mc.make_sharded_tensors_for_checkpoint(
            {"weight": self.weight, "weight_up": self.weight_up},
            prefix,
            {},
            sharded_offsets,
            tp_group=mc.parallel_state.get_tensor_model_parallel_group(),
            dp_cp_group=dp_group(metadata),
        )

    def extra_repr(self) -> str:
        return f"{self.base_hidden}+{self.weight_up.numel()}, eps={self.eps}" + (
            ", skip_base_grad" if self.skip_base_grad else "")


class RMSNorm(nn.Module):
    """A plain RMSNorm for the non-SCALE models, computed as megatron-core's local one
    (torch.nn.RMSNorm -> F.rms_norm) and with the same checkpoint entry (`weight`), that also
    works under sequence parallelism (megatron-core's torch norm refuses it)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.config = config
        self.eps = eps
        kw = {"dtype": config.params_dtype, "device": param_device(config)}
        self.weight = nn.Parameter(torch.ones(hidden_size, **kw))
        self.weight.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]  # megatron-core's parameter tag (Tensor declares none)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(hidden, (hidden.shape[-1],), self.weight, self.eps)

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> dict:
        return mc.make_sharded_tensors_for_checkpoint(
            {"weight": self.weight}, prefix, {}, sharded_offsets,
            tp_group=mc.parallel_state.get_tensor_model_parallel_group(), dp_cp_group=dp_group(metadata),
        )

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"

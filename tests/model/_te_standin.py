"""A torch stand-in for the part of `transformer_engine.pytorch` SCALE's TE backend uses.

Transformer Engine cannot be imported without an NVIDIA driver, so on CPU the TE backend's own
code (te_linear.py: which block multiplies what, the TP attributes, the checkpoint entries, the
FP8-cast flags it hands TE) is checked against this: `Linear` has TE's constructor arguments and
forward signature, multiplies with torch.matmul, and records the `is_first_microbatch` it was given.
Nothing about TE itself is learned from it; the `gpu` tests run the real one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class Linear(nn.Module):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool,
        params_dtype: torch.dtype,
        device: Any,
        init_method: Callable[[torch.Tensor], None],
        parallel_mode: str | None,
        tp_size: int,
        sequence_parallel: bool,
        fuse_wgrad_accumulation: bool,
    ) -> None:
        super().__init__()
        if bias or parallel_mode is not None or tp_size != 1 or sequence_parallel:
            raise AssertionError("SCALE's TE blocks are bias-free, local GEMMs (parallel_mode=None)")
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=params_dtype, device=device))
        with torch.no_grad():
            init_method(self.weight)
        # TE marks its weights as TP shards along dim 0 (module/linear.py, reset_parameters).
        self.weight.tensor_model_parallel = True  # type: ignore[attr-defined]
        self.weight.partition_dim = 0  # type: ignore[attr-defined]
        self.weight.partition_stride = 1  # type: ignore[attr-defined]
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.flags: list[bool | None] = []
        self.loaded_extra_state: Any = None

    def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        self.flags.append(is_first_microbatch)
        return torch.matmul(inp, self.weight.t())

    def get_extra_state(self) -> Any:
        return torch.tensor(len(self.flags), dtype=torch.uint8).reshape(1)  # TE: a byte tensor

    def set_extra_state(self, state: Any) -> None:
        self.loaded_extra_state = state

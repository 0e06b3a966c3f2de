"""LoRA on megatron-core's own tensor-parallel linears (linear_qkv, linear_proj, linear_fc1, linear_fc2).

    y = W x + (alpha / r) B A dropout(x)      W [out, in]  the base weight, frozen, untouched
                                              A [r, in]    trainable, uniform(-1/sqrt(in), 1/sqrt(in))
                                              B [out, r]   trainable, zero: at init y = W x exactly

`LoraColumnParallelLinear` and `LoraRowParallelLinear` subclass megatron-core's ColumnParallelLinear
and RowParallelLinear: the base path is the parent's forward, unchanged, and the low-rank path is
added to its output. With B = 0 that adds exact zeros, so a LoRA model at initialisation computes
the base model's logits bitwise. Tensor-parallel layout (no sequence parallelism):

    column-parallel (qkv, fc1)  W [out/tp, in]  A [r, in] replicated       B [out/tp, r] row shard
        h = A x is the same on every TP rank; its gradient is all-reduced over TP
        (copy_to_tensor_model_parallel_region), so every rank holds A's full gradient.
    row-parallel (proj, fc2)    W [out, in/tp]  A [r, in/tp] column shard  B [out, r] replicated
        h = sum over TP ranks of A_t x_t: an r-wide all-reduce beside the base output's
        (reduce_from_tensor_model_parallel_region); every rank then applies the same B.

Replicated tensors carry no tensor-parallel attributes, so megatron-core counts them once in the
gradient norm; their gradients are identical on every TP rank by construction.

Checkpoints: the base keys stay exactly megatron-core's (`<prefix>weight`, layers stacked), so a base
checkpoint loads into a LoRA model and the frozen-base digest covers the same tensors. `lora_a` and
`lora_b` get keys of their own beside `weight`, as global tensors ([L, r, in], [L, out, r]): split
on the TP axis where they are split (fc1's B through megatron-core's SwiGLU factory, like fc1's
weight, so its [gate; up] rows reshard), replicated ones with replica ids over TP and DP. A
checkpoint saved at one TP size loads at another.

A is drawn from a generator seeded by (seed, global layer number, module path) (`init_lora_model`),
as a full [r, in] tensor of which a rank keeps its slice: the same adapters at any TP/PP layout.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from megatron_scale import _mcore as mc
from megatron_scale.model.layers.partition import dp_group, param_device

LORA_PARAMS = ("lora_a", "lora_b")
TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


@dataclass(frozen=True, kw_only=True)
class LoraSettings:
    """Rank r, alpha (the update is scaled by alpha / r), input dropout, and the seed of A."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    seed: int = 1234

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"LoraSettings.rank (--lora-rank) {self.rank} must be >= 1")
        if not self.alpha > 0:
            raise ValueError(f"LoraSettings.alpha (--lora-alpha) {self.alpha} must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraSettings.dropout (--lora-dropout) {self.dropout} must lie in [0, 1)")

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def record(self) -> dict[str, int | float]:
        """What a checkpoint must agree on (dropout and seed do not change the function)."""
        return {"rank": self.rank, "alpha": float(self.alpha)}


def is_lora_key(key: str) -> bool:
    """Whether a checkpoint key is a LoRA tensor (`....lora_a` / `....lora_b`)."""
    return key.rsplit(".", 1)[-1] in LORA_PARAMS


class _LoraLinear:
    """The low-rank path shared by both parallel variants (mixed into megatron-core's classes)."""

    # what it reads of megatron-core's ColumnParallelLinear / RowParallelLinear, the torch modules it
    # is mixed into (declared here: megatron-core ships no type information)
    config: Any
    is_expert: bool
    weight: nn.Parameter | None
    tp_group: Any
    input_size: int
    training: bool
    state_dict: Callable[..., dict[str, Any]]

    lora: LoraSettings
    lora_a: nn.Parameter
    lora_b: nn.Parameter
    _a_split: int | None  # axis of A split over TP ranks (None: replicated)

    def _setup_lora(self, lora: LoraSettings, a_local: tuple[int, int], b_local: tuple[int, int],
                    a_split: int | None, b_split: int | None) -> None:
        cfg = self.config
        if cfg.sequence_parallel:
            raise NotImplementedError("LoRA linears do not support sequence parallelism")
        if self.is_expert:
            raise NotImplementedError("LoRA linears do not support mixture-of-experts layers")
        if self.weight is None:
            raise ValueError("LoRA linears own their base weight (skip_weight_param_allocation=False)")
        self.lora = lora
        self._a_split = a_split
        self._tp_size = mc.get_pg_size(self.tp_group)
        self._tp_rank = mc.get_pg_rank(self.tp_group)
        dev, dtype = param_device(cfg), cfg.params_dtype
        self.lora_a = nn.Parameter(torch.empty(a_local, device=dev, dtype=dtype))
        self.lora_b = nn.Parameter(torch.empty(b_local, device=dev, dtype=dtype))
        for p, axis in ((self.lora_a, a_split), (self.lora_b, b_split)):
            if axis is not None:  # a TP shard, for megatron-core's grad norm and optimizer
                mc.tensor_parallel.set_tensor_model_parallel_attributes(p, is_parallel=True, dim=axis, stride=1)
        self.reset_lora_parameters(lora.seed)

    @torch.no_grad()
    def reset_lora_parameters(self, seed: int) -> None:
        """A from a generator seeded by `seed`, drawn whole and sliced to this rank; B = 0."""
        n = self.input_size
        g = torch.Generator().manual_seed(seed)
        full = (torch.rand(self.lora.rank, n, generator=g, dtype=torch.float64) * 2 - 1) / math.sqrt(n)
        if self._a_split is not None:
            local = n // self._tp_size
            full = full[:, self._tp_rank * local : (self._tp_rank + 1) * local]
        self.lora_a.copy_(full)
        self.lora_b.zero_()

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        p = self.lora.dropout
        if p == 0.0 or not self.training:
            return x
        if self._a_split is None:  # replicated input: the same mask on every TP rank
            return F.dropout(x, p, True)
        with mc.tensor_parallel.get_cuda_rng_tracker().fork():  # this rank's input columns
            return F.dropout(x, p, True)

    def _lora_sharded(self, prefix: str, sharded_offsets: tuple, metadata: dict | None,
                      axis_map: dict[str, int]) -> dict:
        state = self.state_dict(prefix="", keep_vars=True)
        return mc.make_sharded_tensors_for_checkpoint(
            state, prefix, axis_map, sharded_offsets,
            tp_group=self.tp_group, dp_cp_group=dp_group(metadata),
        )

    def extra_repr(self) -> str:
        # super(): the megatron-core linear this is mixed into, which the mixin's type does not know
        return f"{super().extra_repr()}, lora_rank={self.lora.rank}, lora_alpha={self.lora.alpha}"  # type: ignore[misc]  # see above


class LoraColumnParallelLinear(_LoraLinear, mc.ColumnParallelLinear):
    """ColumnParallelLinear + LoRA: A [r, in] replicated, B [out/tp, r] split like W's rows.

    `swiglu`: the layer is a gated MLP's linear_fc1, whose rank-local rows are [gate_t; up_t];
    B is then checkpointed through the same SwiGLU factory as W."""

    def __init__(self, input_size: int, output_size: int, *, lora: LoraSettings, swiglu: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(input_size, output_size, **kwargs)
        if self.gather_output:
            raise ValueError("LoRA column-parallel linears keep their output split (gather_output=False)")
        self.swiglu = swiglu
        self._setup_lora(lora, (lora.rank, input_size), (self.output_size_per_partition, lora.rank),
                         a_split=None, b_split=0)

    def forward(self, input_: torch.Tensor, weight: torch.Tensor | None = None,
                runtime_gather_output: bool | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if weight is not None or runtime_gather_output:
            raise ValueError("LoRA linears use their own weight and keep their output split")
        out, bias = super().forward(input_)
        h = F.linear(self._dropout(input_), self.lora_a)
        if self._tp_size > 1:
            h = mc.copy_to_tensor_model_parallel_region(h, group=self.tp_group)
        return out + F.linear(h, self.lora_b) * self.lora.scaling, bias

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        out = self._lora_sharded(prefix, sharded_offsets, metadata, {"weight": 0, "bias": 0, "lora_b": 0})
        if self.swiglu:
            key = f"{prefix}lora_b"
            out[key] = mc.apply_swiglu_sharded_factory(
                out[key], sharded_offsets, (metadata or {}).get("singleton_local_shards", False),
                tp_group=self.tp_group, dp_group=dp_group(metadata),
            )
        return out


class LoraRowParallelLinear(_LoraLinear, mc.RowParallelLinear):
    """RowParallelLinear + LoRA: A [r, in/tp] split like W's columns, B [out, r] replicated."""

    def __init__(self, input_size: int, output_size: int, *, lora: LoraSettings, **kwargs: Any) -> None:
        super().__init__(input_size, output_size, **kwargs)
        if not self.input_is_parallel:
            raise ValueError("LoRA row-parallel linears expect an input already split over TP ranks")
        self._setup_lora(lora, (lora.rank, self.input_size_per_partition), (output_size, lora.rank),
                         a_split=1, b_split=None)

    def forward(self, input_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, bias = super().forward(input_)
        h = F.linear(self._dropout(input_), self.lora_a)
        if self._tp_size > 1:
            h = mc.reduce_from_tensor_model_parallel_region(h, group=self.tp_group)
        return out + F.linear(h, self.lora_b) * self.lora.scaling, bias

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        return self._lora_sharded(prefix, sharded_offsets, metadata, {"weight": 1, "lora_a": 1})


def _expect(value: Any, cls: type, where: str) -> None:
    if value is not cls:
        raise ValueError(f"LoRA layer spec: expected {cls.__name__} at {where}, found {value!r}")


def lora_layer_spec(base: Any, lora: LoraSettings, *, gated: bool) -> Any:
    """megatron-core's local GPT layer spec with its four linears swapped for LoRA ones.

    `base` is `get_gpt_layer_local_spec(...)`; `gated`: the MLP is SwiGLU (config.gated_linear_unit)."""
    layer = base.submodules
    attn = layer.self_attention.submodules
    _expect(attn.linear_qkv, mc.ColumnParallelLinear, "self_attention.linear_qkv")
    _expect(attn.linear_proj, mc.RowParallelLinear, "self_attention.linear_proj")
    mlp = layer.mlp
    if not isinstance(mlp, functools.partial) or "submodules" not in mlp.keywords:
        raise ValueError(f"LoRA layer spec: unexpected MLP spec {mlp!r}")
    mlp_sub = mlp.keywords["submodules"]
    _expect(mlp_sub.linear_fc1, mc.ColumnParallelLinear, "mlp.linear_fc1")
    _expect(mlp_sub.linear_fc2, mc.RowParallelLinear, "mlp.linear_fc2")
    column = functools.partial(LoraColumnParallelLinear, lora=lora)
    row = functools.partial(LoraRowParallelLinear, lora=lora)
    attention = dataclasses.replace(
        layer.self_attention,
        submodules=dataclasses.replace(attn, linear_qkv=column, linear_proj=row),
    )
    mlp = functools.partial(mlp.func, *mlp.args, **{
        **mlp.keywords,
        "submodules": dataclasses.replace(
            mlp_sub, linear_fc1=functools.partial(column, swiglu=gated), linear_fc2=row
        ),
    })
    return dataclasses.replace(base, submodules=dataclasses.replace(layer, self_attention=attention, mlp=mlp))


def _stream_seed(seed: int, layer_number: int, path: str) -> int:
    digest = hashlib.sha256(f"{seed}/{layer_number}/{path}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def lora_linears(model: nn.Module) -> list[tuple[str, _LoraLinear]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, _LoraLinear)]


def init_lora_model(model: mc.GPTModel, lora: LoraSettings) -> None:
    """Finish a GPTModel built from `lora_layer_spec`: freeze everything but the adapters
    (embedding, output layer and its tied copy, norms, base weights) and draw each A from its own
    stream, keyed by the global layer number, so every TP/PP layout starts from the same adapters."""
    found = 0
    for layer in model.decoder.layers:
        for path, module in lora_linears(layer):
            module.reset_lora_parameters(_stream_seed(lora.seed, layer.layer_number, path))
            found += 1
    if found != len(TARGETS) * len(model.decoder.layers):
        raise ValueError(f"LoRA: expected {len(TARGETS)} LoRA linears per layer, found {found} in all")
    for name, p in model.named_parameters():
        p.requires_grad_(name.rsplit(".", 1)[-1] in LORA_PARAMS)

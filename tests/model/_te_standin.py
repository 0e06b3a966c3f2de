"""A torch stand-in for the part of `transformer_engine.pytorch` SCALE's TE backend uses.

Transformer Engine cannot be imported without an NVIDIA driver, so on CPU the TE backend's own
code (te_linear.py: which block multiplies what, the TP attributes, the checkpoint entries, the
FP8-cast flags it hands TE) is checked against this: `Linear` has TE's constructor arguments and
forward signature, multiplies with torch.matmul, and records the `is_first_microbatch` it was given.

`functional` stands in for TE's functional layer as te_fused.py calls it (model/layers/te.py
te_functional): `general_gemm` (transformer_engine.pytorch.cpp_extensions, TE 2.20's keywords and
its layouts TN / NN / NT), `rmsnorm_fwd` / `rmsnorm_bwd`, `swiglu` / `dswiglu`
(transformer_engine_torch, their positional arguments) and `TE_DType`. Each call is recorded
(`functional.calls`: its name, operand shapes, layout, accumulate, whether an output was given)
and refused, as an AssertionError, where TE would read memory wrongly: a non-contiguous operand
(TE's C++ takes a pointer and a shape). The stand-ins write no copies of their own (the step audit
counts the caller's; rmsnorm_fwd's write into a given ln_out is TE's kernel's, `kernel_writes`), and
compute as megatron_scale/model/layers/torch_ops.py does (the local path's torch.matmul and
F.rms_norm), so a composition that hands them the base model's operands gets the base model's bits.
Nothing about TE itself is learned from it; the `gpu` tests run the real one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from megatron_scale.model.layers.torch_ops import TorchOps
from megatron_scale.testing.step_audit import kernel_writes


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


class _Functional(TorchOps):
    """TE's functional calls (the module docstring): torch_ops.py's compute, each call recorded in
    `calls` (`reset()` clears) and its operands checked as TE's C++ would need them."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.calls.clear()

    def _record(self, name: str, **operands: Any) -> dict[str, Any]:
        for k, t in operands.items():
            if isinstance(t, torch.Tensor) and not t.is_contiguous():
                raise AssertionError(f"TE stand-in: {name} got a non-contiguous {k} {tuple(t.shape)} {t.stride()}")
        call = {"name": name, **{k: tuple(t.shape) for k, t in operands.items() if isinstance(t, torch.Tensor)},
                **{f"{k}_ptr": t.data_ptr() for k, t in operands.items() if isinstance(t, torch.Tensor)}}
        self.calls.append(call)
        return call

    def general_gemm(self, A: torch.Tensor, B: torch.Tensor, out_dtype: torch.dtype | None = None,
                     quantization_params: Any = None, gelu: bool = False, gelu_in: Any = None, alpha: float = 1.0,
                     beta: float | None = None, accumulate: bool = False, layout: str = "TN",
                     out: torch.Tensor | None = None, bias: Any = None, use_split_accumulator: bool = False,
                     grad: bool = False, **unused: Any) -> tuple[torch.Tensor, None, None, None]:
        call = self._record("general_gemm", A=A, B=B, out=out)
        call.update(layout=layout, accumulate=accumulate, out_given=out is not None, grad=grad,
                    out_offset=None if out is None else out.storage_offset(), quantized=quantization_params is not None)
        try:
            return super().general_gemm(A, B, out_dtype, quantization_params, gelu, gelu_in, alpha, beta, accumulate,
                                        layout, out, bias, use_split_accumulator, grad)
        except ValueError as e:
            raise AssertionError(f"TE stand-in: {e}") from e

    def rmsnorm_fwd(self, inp: torch.Tensor, weight: torch.Tensor, eps: float, ln_out: Any, quantizer: Any,
                    otype: Any, sm_margin: int, zero_centered_gamma: bool) -> list[Any]:
        self._record("rmsnorm_fwd", input=inp, weight=weight, ln_out=ln_out)
        try:
            with kernel_writes():  # TE's kernel writes a given ln_out itself: the stand-in's copy is not the caller's
                return super().rmsnorm_fwd(inp, weight, eps, ln_out, quantizer, otype, sm_margin, zero_centered_gamma)
        except ValueError as e:
            raise AssertionError(f"TE stand-in: {e}") from e

    def rmsnorm_bwd(self, dz: torch.Tensor, x: torch.Tensor, rsigma: torch.Tensor, gamma: torch.Tensor,
                    sm_margin: int, zero_centered_gamma: bool) -> list[torch.Tensor]:
        self._record("rmsnorm_bwd", dz=dz, x=x, rsigma=rsigma, gamma=gamma)
        return super().rmsnorm_bwd(dz, x, rsigma, gamma, sm_margin, zero_centered_gamma)

    def swiglu(self, inp: torch.Tensor, quantizer: Any) -> torch.Tensor:
        self._record("swiglu", input=inp)
        return super().swiglu(inp, quantizer)

    def dswiglu(self, grad: torch.Tensor, inp: torch.Tensor, quantizer: Any) -> torch.Tensor:
        self._record("dswiglu", grad=grad, input=inp)
        return super().dswiglu(grad, inp, quantizer)


functional = _Functional()

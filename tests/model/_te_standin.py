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
counts the caller's; rmsnorm_fwd's write into a given ln_out is TE's kernel's, `kernel_writes`), and compute as the local path does (torch.matmul; F.rms_norm), so a
composition that hands them the base model's operands gets the base model's bits.
Nothing about TE itself is learned from it; the `gpu` tests run the real one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

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


class _Functional:
    """TE's functional calls (the module docstring); `calls` records them, `reset()` clears."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.TE_DType = {torch.float32: torch.float32, torch.bfloat16: torch.bfloat16, torch.float16: torch.float16}

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
        """TN: B A^T (forward, A the weight); NN: B A (dgrad); NT: B^T A (wgrad, A the input)."""
        call = self._record("general_gemm", A=A, B=B, out=out)
        call.update(layout=layout, accumulate=accumulate, out_given=out is not None, grad=grad,
                    out_offset=None if out is None else out.storage_offset(), quantized=quantization_params is not None)
        if bias is not None or gelu or quantization_params is not None or alpha != 1.0:
            raise AssertionError("TE stand-in: SCALE's GEMMs take no bias, GELU, output quantizer or alpha")
        if accumulate and out is None:
            raise AssertionError("TE stand-in: accumulate=True needs out")
        a, b = (A, B) if out is None or out.dtype == A.dtype else (A.to(out.dtype), B.to(out.dtype))
        pairs = {"TN": (b, a.t()), "NN": (b, a), "NT": (b.t(), a)}
        if layout not in pairs:
            raise AssertionError(f"TE stand-in: layout {layout}")
        m1, m2 = pairs[layout]
        if out is None:
            res = torch.matmul(m1, m2)  # the local path's call: the base model's bits
            return (res if out_dtype is None else res.to(out_dtype)), None, None, None
        if tuple(out.shape) != (m1.shape[0], m2.shape[1]):
            raise AssertionError(f"TE stand-in: out {tuple(out.shape)} for a {(m1.shape[0], m2.shape[1])} product")
        if accumulate:
            out.addmm_(m1, m2)
        else:
            torch.mm(m1, m2, out=out)
        return out, None, None, None

    def rmsnorm_fwd(self, inp: torch.Tensor, weight: torch.Tensor, eps: float, ln_out: Any, quantizer: Any,
                    otype: Any, sm_margin: int, zero_centered_gamma: bool) -> list[Any]:
        self._record("rmsnorm_fwd", input=inp, weight=weight, ln_out=ln_out)
        if quantizer is not None or zero_centered_gamma:
            raise AssertionError("TE stand-in: SCALE's norm takes no quantizer or zero-centred gamma")
        rsigma = torch.rsqrt(inp.float().pow(2).mean(-1) + eps)
        z = F.rms_norm(inp, (inp.shape[-1],), weight, eps)
        if ln_out is None:
            return [z, None, rsigma]
        if ln_out.shape != inp.shape or ln_out.dtype != z.dtype:
            raise AssertionError(f"TE stand-in: ln_out {tuple(ln_out.shape)} {ln_out.dtype} for {tuple(inp.shape)} {z.dtype}")
        with kernel_writes():  # TE's kernel writes its output there: the stand-in's copy is not the caller's
            ln_out.copy_(z)
        return [ln_out, None, rsigma]

    def rmsnorm_bwd(self, dz: torch.Tensor, x: torch.Tensor, rsigma: torch.Tensor, gamma: torch.Tensor,
                    sm_margin: int, zero_centered_gamma: bool) -> list[torch.Tensor]:
        self._record("rmsnorm_bwd", dz=dz, x=x, rsigma=rsigma, gamma=gamma)
        rs = rsigma.unsqueeze(-1)
        xhat = x.float() * rs
        dxhat = dz.float() * gamma.float()
        dx = rs * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
        dgamma = (dz.float() * xhat).sum(0)
        return [dx.to(x.dtype), dgamma.to(gamma.dtype)]

    def swiglu(self, inp: torch.Tensor, quantizer: Any) -> torch.Tensor:
        self._record("swiglu", input=inp)
        gate, up = inp.chunk(2, dim=-1)
        return F.silu(gate) * up  # megatron-core's glu, op for op: the base model's bits

    def dswiglu(self, grad: torch.Tensor, inp: torch.Tensor, quantizer: Any) -> torch.Tensor:
        self._record("dswiglu", grad=grad, input=inp)
        gate, up = inp.chunk(2, dim=-1)
        f = gate.shape[-1]
        out = torch.empty_like(inp)
        sig = torch.sigmoid(gate)
        torch.mul(grad * up, sig * (1 + gate * (1 - sig)), out=out[..., :f])  # written in place: no cat
        torch.mul(grad, F.silu(gate), out=out[..., f:])
        return out


functional = _Functional()

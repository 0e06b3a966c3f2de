"""Transformer Engine's functional layer, as te_fused.py calls it, in torch ops (--scale-local-linear planar).

te_fused.py composes SCALE's upscaled linears from five calls: general_gemm (layouts TN / NN / NT,
into a given output, accumulating or not), rmsnorm_fwd / rmsnorm_bwd, swiglu / dswiglu, and the
TE_DType map. `TORCH_OPS` is that interface over torch: the same arguments TE 2.20 takes, computed
as the local path computes (torch.matmul for a fresh output, so the base GEMM gives megatron-core's
local bits; mm / addmm_ into a given one; F.rms_norm; megatron-core's SwiGLU op for op). With it the
local path runs te_fused.py's planar composition (planar.py) on any device, without TE.

What TE's kernels do that these cannot: write the norm into a given `ln_out` on any device (on the
CPU F.rms_norm's own arithmetic is written there, bitwise; elsewhere, where torch may fuse it
differently, F.rms_norm and a copy), and cast operands inside the GEMM (here a copy to the
output's dtype where they differ, as for fp32 main_grad with bf16 activations). Quantizers, bias, GELU and
alpha are not SCALE's and are refused.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

_LAYOUTS = ("TN", "NN", "NT")


class TorchOps:
    """general_gemm, rmsnorm_fwd, rmsnorm_bwd, swiglu, dswiglu and TE_DType, in torch (module docstring)."""

    TE_DType = {torch.float32: torch.float32, torch.bfloat16: torch.bfloat16, torch.float16: torch.float16}

    def general_gemm(self, A: torch.Tensor, B: torch.Tensor, out_dtype: torch.dtype | None = None,
                     quantization_params: Any = None, gelu: bool = False, gelu_in: Any = None, alpha: float = 1.0,
                     beta: float | None = None, accumulate: bool = False, layout: str = "TN",
                     out: torch.Tensor | None = None, bias: Any = None, use_split_accumulator: bool = False,
                     grad: bool = False, **unused: Any) -> tuple[torch.Tensor, None, None, None]:
        """TN: B A^T (forward, A the weight); NN: B A (dgrad); NT: B^T A (wgrad, A the input)."""
        if bias is not None or gelu or quantization_params is not None or alpha != 1.0:
            raise ValueError("general_gemm: SCALE's GEMMs take no bias, GELU, output quantizer or alpha")
        if layout not in _LAYOUTS:
            raise ValueError(f"general_gemm: layout {layout!r}, not one of {_LAYOUTS}")
        if accumulate and out is None:
            raise ValueError("general_gemm: accumulate=True needs out")
        a, b = (A, B) if out is None or out.dtype == A.dtype else (A.to(out.dtype), B.to(out.dtype))
        m1, m2 = {"TN": (b, a.t()), "NN": (b, a), "NT": (b.t(), a)}[layout]
        if out is None:
            res = torch.matmul(m1, m2)  # the local path's call: the base model's bits
            return (res if out_dtype is None else res.to(out_dtype)), None, None, None
        if tuple(out.shape) != (m1.shape[0], m2.shape[1]):
            raise ValueError(f"general_gemm: out {tuple(out.shape)} for a {(m1.shape[0], m2.shape[1])} product")
        if accumulate:
            out.addmm_(m1, m2)
        else:
            torch.mm(m1, m2, out=out)
        return out, None, None, None

    def rmsnorm_fwd(self, inp: torch.Tensor, weight: torch.Tensor, eps: float, ln_out: Any, quantizer: Any,
                    otype: Any, sm_margin: int, zero_centered_gamma: bool) -> list[Any]:
        """[normalised, None, rsigma (fp32, per row)]; into `ln_out` where given."""
        if quantizer is not None or zero_centered_gamma:
            raise ValueError("rmsnorm_fwd: SCALE's norm takes no quantizer or zero-centred gamma")
        up = inp.float()  # F.rms_norm's arithmetic: fp32 for lower precisions (a no-op on fp32)
        rsigma = torch.rsqrt(up.pow(2).mean(-1) + eps)
        if ln_out is None:
            return [F.rms_norm(inp, (inp.shape[-1],), weight, eps), None, rsigma]  # norm.py's RMSNorm: the base's bits
        if ln_out.shape != inp.shape or ln_out.dtype != inp.dtype:
            raise ValueError(f"rmsnorm_fwd: ln_out {tuple(ln_out.shape)} {ln_out.dtype} for {tuple(inp.shape)} {inp.dtype}")
        if inp.device.type == "cpu":  # F.rms_norm's composite there, op for op, written into ln_out: no copy
            torch.mul(up * rsigma.unsqueeze(-1), weight, out=ln_out)
        else:  # where torch may run a fused kernel of its own, its bits and a copy
            ln_out.copy_(F.rms_norm(inp, (inp.shape[-1],), weight, eps))
        return [ln_out, None, rsigma]

    def rmsnorm_bwd(self, dz: torch.Tensor, x: torch.Tensor, rsigma: torch.Tensor, gamma: torch.Tensor,
                    sm_margin: int, zero_centered_gamma: bool) -> list[torch.Tensor]:
        """[dx, dgamma] (fp32 inside, as TE's kernel accumulates)."""
        rs = rsigma.unsqueeze(-1)
        xhat = x.float() * rs
        dxhat = dz.float() * gamma.float()
        dx = rs * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
        dgamma = (dz.float() * xhat).sum(0)
        return [dx.to(x.dtype), dgamma.to(gamma.dtype)]

    def swiglu(self, inp: torch.Tensor, quantizer: Any) -> torch.Tensor:
        """silu(gate) * up over [gate, up] (last dimension)."""
        gate, up = inp.chunk(2, dim=-1)
        return F.silu(gate) * up  # megatron-core's glu, op for op: the base model's bits

    def dswiglu(self, grad: torch.Tensor, inp: torch.Tensor, quantizer: Any) -> torch.Tensor:
        """The gradient over [gate, up], each half written in place (no concatenation)."""
        gate, up = inp.chunk(2, dim=-1)
        f = gate.shape[-1]
        out = torch.empty_like(inp)
        sig = torch.sigmoid(gate)
        torch.mul(grad * up, sig * (1 + gate * (1 - sig)), out=out[..., :f])
        torch.mul(grad, F.silu(gate), out=out[..., f:])
        return out


TORCH_OPS = TorchOps()

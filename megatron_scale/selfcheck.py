"""The environment's self-check: `python -m megatron_scale.selfcheck`.

What the project's Docker image promises, checked where it runs: NVIDIA's own PyTorch (the build
Transformer Engine, apex, NCCL and cuDNN were compiled against), Transformer Engine's PyTorch
module, apex's fused kernels (the ones megatron-core's optimizer and grad clipping use), megatron-core
at the pinned version, and megatron_scale itself. It prints each version, and with a CUDA device
runs one tiny step: a bf16 matmul forward/backward in torch and, where Transformer Engine imports, a
`te.Linear` and a `te.RMSNorm` forward/backward in bf16 (TE's own kernels: a core library that has
no code for this GPU fails here), and the `te.Linear` once more under FP8 autocast where the GPU
supports FP8 (TE's cast kernels). tools/gpu_run.sh's smoke test is this check.

    python -m megatron_scale.selfcheck                           # anywhere: report, skip what is absent
    python -m megatron_scale.selfcheck --image --expect-torch V  # docker build: the image's contents
    python -m megatron_scale.selfcheck --image --require-gpu     # on a node: and the CUDA step must run
    python -m megatron_scale.selfcheck --require-gpu --te-fused --graphs   # tools/gpu_run.sh perf1's smoke

Exit status: 0 when every required check passed (a skipped check says why it was skipped), 1 when
one failed, 2 for bad arguments. Without `--image`, an absent Transformer Engine or apex is a skip;
with it, a failure. Without `--require-gpu`, no CUDA device is a skip. Importing Transformer Engine
needs the NVIDIA driver (libcuda.so.1), which `docker build` does not have: there the import is
skipped with that reason and `--image` still requires TE's distribution to be installed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Literal

Status = Literal["ok", "skip", "fail"]

TE_DISTRIBUTIONS = ("transformer_engine", "transformer-engine", "transformer_engine_torch")
APEX_MODULES = ("apex", "amp_C", "apex.multi_tensor_apply", "apex.optimizers")


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    status: Status
    detail: str


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def cuda_driver() -> str | None:
    """None when the NVIDIA driver library loads, else why not (no GPU passed into the container,
    or `docker build`, which never has one)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no NVIDIA driver library here (libcuda.so.1: {e})"
    return None


def torch_matches(found: str, expected: str) -> bool:
    """`found` is `expected` or a build of it with more local segments: NVIDIA's release notes name
    2.10.0a0+b4e4ee81d3 and the wheel may say 2.10.0a0+b4e4ee81d3.nv25.12."""
    return found == expected or ("+" in expected and found.startswith(expected + "."))


def check_torch(expected: list[str]) -> list[Check]:
    import torch

    found = torch.__version__
    cuda = torch.version.cuda or "none (CPU build)"
    checks = [Check("torch", "ok", f"{found} (CUDA {cuda}, from {torch.__file__})")]
    for want in expected:
        if not torch_matches(found, want):
            checks.append(Check("--expect-torch", "fail",
                                f"torch is {found}, not {want}: a pip install replaced the base image's torch"))
        else:
            checks.append(Check("--expect-torch", "ok", f"{found} is {want}"))
    return checks


def check_modules(name: str, modules: tuple[str, ...], dists: tuple[str, ...], required: bool,
                  driver: str | None) -> tuple[Check, bool]:
    """Import each of `modules`; (the check, whether all imported)."""
    dist = _dist_version(*dists)
    absent: Status = "fail" if required else "skip"
    if dist is None:
        return Check(name, absent, f"not installed (distribution {' / '.join(dists)} not found)"), False
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 (an extension may raise anything from its loader)
            if driver is not None:
                return Check(name, "skip", f"{dist} installed; import {module} skipped: {driver}"), False
            return Check(name, "fail", f"{dist} installed but import {module} failed: {type(e).__name__}: {e}"), False
    return Check(name, "ok", f"{dist} ({', '.join(modules)} import)"), True


def check_project() -> list[Check]:
    import megatron_scale

    checks = [Check("megatron_scale", "ok", f"{_dist_version('megatron-scale') or 'source tree'} "
                                            f"(from {megatron_scale.__file__})")]
    try:
        from megatron_scale import _mcore
    except ImportError as e:  # the pinned-version check names both versions
        return [*checks, Check("megatron-core", "fail", str(e))]
    return [*checks, Check("megatron-core", "ok", f"{_mcore.MCORE_VERSION} (the pinned version)")]


def cuda_step(te_imported: bool) -> list[Check]:
    """One tiny forward/backward on the first CUDA device; assumes torch.cuda.is_available()."""
    import torch

    dev = torch.device("cuda", 0)
    x = torch.randn(32, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(64, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    (x @ w).float().square().mean().backward()
    torch.cuda.synchronize()
    ok = x.grad is not None and bool(torch.isfinite(x.grad).all())
    name = torch.cuda.get_device_name(dev)
    checks = [Check("cuda step", "ok" if ok else "fail", f"bf16 matmul fwd/bwd on {name}")]
    if not te_imported:
        return [*checks, Check("te step", "skip", "Transformer Engine did not import")]
    import transformer_engine.pytorch as te

    layer = te.Linear(64, 64, params_dtype=torch.bfloat16, device="cuda")
    inp = torch.randn(32, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    layer(inp).float().square().mean().backward()
    torch.cuda.synchronize()
    finite = inp.grad is not None and bool(torch.isfinite(inp.grad).all())
    # TE's own kernels (the core library's cubins; cuBLAS does te.Linear's GEMM): a fused RMSNorm
    norm = te.RMSNorm(64, params_dtype=torch.bfloat16, device="cuda")
    x2 = inp.detach().requires_grad_()
    norm(x2).float().square().mean().backward()
    torch.cuda.synchronize()
    finite = finite and x2.grad is not None and bool(torch.isfinite(x2.grad).all())
    checks.append(Check("te step", "ok" if finite else "fail", "te.Linear and te.RMSNorm bf16 fwd/bwd"))
    # TE 2.20's names (fp8.check_fp8_support and fp8_autocast still work there, deprecated)
    if hasattr(te, "is_fp8_available"):
        fp8_ok, why = te.is_fp8_available(return_reason=True)
    else:
        fp8_ok, why = False, "this TE has no transformer_engine.pytorch.is_fp8_available"
    if not fp8_ok:
        return [*checks, Check("fp8 step", "skip", f"FP8 not available: {why}")]
    with (te.autocast if hasattr(te, "autocast") else te.fp8_autocast)(enabled=True):
        out = layer(inp.detach().requires_grad_())
    out.float().square().mean().backward()
    torch.cuda.synchronize()
    fine = bool(torch.isfinite(out).all())
    return [*checks, Check("fp8 step", "ok" if fine else "fail", "te.Linear under fp8_autocast fwd/bwd")]


def te_fused_step() -> Check:
    """TE's functional calls exactly as model/layers/te_fused.py makes them (te.te_functional), each
    against torch on one small bf16 problem: the signatures and layouts the one-node TE linears rely
    on, checked in a second instead of inside a model."""
    import torch
    import torch.nn.functional as F

    from megatron_scale.model.layers.te import te_functional

    ops, dev, bf = te_functional(), torch.device("cuda", 0), torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    x, w, dy = (torch.randn(*s, device=dev, dtype=bf, generator=g) for s in ((32, 64), (48, 64), (32, 48)))
    gamma = 1 + 0.1 * torch.randn(64, device=dev, dtype=bf, generator=g)
    got = {
        "TN": ops.general_gemm(w, x, out_dtype=bf, layout="TN")[0],
        "NN": ops.general_gemm(w, dy, out_dtype=bf, layout="NN", grad=True)[0],
        "NT": ops.general_gemm(x, dy, out_dtype=bf, layout="NT", grad=True)[0],
    }
    acc = torch.zeros(48, 64, device=dev, dtype=torch.float32)
    ops.general_gemm(x, dy, out_dtype=torch.float32, layout="NT", out=acc, accumulate=True, grad=True)
    want = {"TN": x @ w.t(), "NN": dy @ w, "NT": dy.t() @ x}
    errs = [float((got[k].float() - want[k].float()).abs().max() / want[k].float().abs().max()) for k in want]
    errs.append(float((acc - (dy.float().t() @ x.float())).abs().max() / acc.abs().max()))
    # the planar stream's calls (planar.py): a TN GEMM into a buffer's first plane, a norm into a given ln_out
    planar = torch.empty(32 * 48 + 32 * 16, device=dev, dtype=bf)
    ops.general_gemm(w, x, out_dtype=bf, layout="TN", out=planar[:32 * 48].view(32, 48), accumulate=False)
    errs.append(float((planar[:32 * 48].view(32, 48).float() - want["TN"].float()).abs().max()
                      / want["TN"].float().abs().max()))
    ln, _, rs = ops.rmsnorm_fwd(x, gamma, 1e-5, None, None, ops.TE_DType[bf], 0, False)
    errs.append(float((ln.float() - F.rms_norm(x.float(), (64,), gamma.float(), 1e-5)).abs().max()))
    into = torch.empty(2 * 32 * 64, device=dev, dtype=bf)[32 * 64:].view(32, 64)
    ops.rmsnorm_fwd(x, gamma, 1e-5, into, None, ops.TE_DType[bf], 0, False)
    errs.append(float((into.float() - ln.float()).abs().max()))
    dx, dgamma = ops.rmsnorm_bwd(x, x, rs, gamma, 0, False)
    y = torch.randn(32, 128, device=dev, dtype=bf, generator=g)
    a = ops.swiglu(y, None)
    ref = F.silu(y[:, :64].float()) * y[:, 64:].float()
    errs.append(float((a.float() - ref).abs().max() / ref.abs().max()))
    da = ops.dswiglu(torch.ones_like(a), y, None)
    torch.cuda.synchronize()
    shapes = dx.shape == x.shape and dgamma.shape == gamma.shape and da.shape == y.shape
    ok = shapes and max(errs) < 0.05
    return Check("te fused calls", "ok" if ok else "fail",
                 f"general_gemm TN/NN/NT(+accumulate, +into a plane), rmsnorm_fwd(+into ln_out)/bwd, swiglu/dswiglu; "
                 f"max rel err {max(errs):.3g}")


def graphs_step() -> Check:
    """A CUDA graph of a step (matmul forward/backward and a capturable AdamW) captured and replayed,
    equal to the same steps run eagerly; and whether this torch has what megatron-core's whole-iteration
    wrapper asks for (torch.autograd.graph.set_override_stale_capture_stream)."""
    import torch

    dev = torch.device("cuda", 0)
    w0 = torch.randn(64, 64, device=dev)
    x = torch.randn(32, 64, device=dev)

    def make() -> tuple[torch.Tensor, torch.optim.Optimizer]:
        w = torch.nn.Parameter(w0.clone())
        return w, torch.optim.AdamW([w], lr=1e-2, capturable=True)

    def step(w: torch.Tensor, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=False)
        (x @ w).square().mean().backward()
        opt.step()

    w_eager, opt_eager = make()
    for _ in range(6):
        step(w_eager, opt_eager)
    w, opt = make()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(w, opt)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(w, opt)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    same = torch.allclose(w, w_eager, rtol=1e-5, atol=1e-6)
    stale = hasattr(torch.autograd.graph, "set_override_stale_capture_stream")
    return Check("graphs step", "ok" if same else "fail",
                 f"captured step replayed == eager; set_override_stale_capture_stream: {'yes' if stale else 'no'}")


def run(expect_torch: list[str], image: bool, require_gpu: bool, te_fused: bool = False,
        graphs: bool = False) -> list[Check]:
    import torch

    checks = check_torch(expect_torch)
    driver = cuda_driver()
    te, te_imported = check_modules("transformer_engine", ("transformer_engine.pytorch",), TE_DISTRIBUTIONS,
                                    image, driver)
    apex, _ = check_modules("apex", APEX_MODULES, ("apex",), image, driver)
    checks += [te, apex, *check_project()]
    extra = ([("te fused calls", te_fused_step)] if te_fused else []) + ([("graphs step", graphs_step)] if graphs else [])
    if torch.cuda.is_available():
        try:
            checks += cuda_step(te_imported)
        except Exception as e:  # noqa: BLE001 (report the failing step, do not hide the rest)
            checks.append(Check("cuda step", "fail", f"{type(e).__name__}: {e}"))
        for name, fn in extra:
            if name == "te fused calls" and not te_imported:
                checks.append(Check(name, "fail" if require_gpu else "skip", "Transformer Engine did not import"))
                continue
            try:
                checks.append(fn())
            except Exception as e:  # noqa: BLE001
                checks.append(Check(name, "fail", f"{type(e).__name__}: {e}"))
    else:
        why = driver or "the NVIDIA driver loads but torch.cuda.is_available() is False (no visible GPU)"
        if torch.version.cuda is None:
            why = "this torch is a CPU build"
        for name in ["cuda step", *(n for n, _ in extra)]:
            checks.append(Check(name, "fail" if require_gpu else "skip", f"no CUDA device: {why}"))
    return checks


def report(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{c.status:4}  {c.name:<{width}}  {c.detail}" for c in checks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m megatron_scale.selfcheck", description=__doc__.split("\n\n")[0])
    p.add_argument("--expect-torch", action="append", default=[], metavar="VERSION",
                   help="fail unless torch.__version__ is VERSION (or a build of it with more local segments); "
                        "repeatable")
    p.add_argument("--image", action="store_true",
                   help="check the project's image: Transformer Engine and apex must be installed")
    p.add_argument("--require-gpu", action="store_true", help="fail when no CUDA device runs the tiny step")
    p.add_argument("--te-fused", action="store_true",
                   help="also check TE's functional calls as the one-node SCALE linears make them (te_fused.py)")
    p.add_argument("--graphs", action="store_true", help="also capture and replay a CUDA graph of a tiny step")
    args = p.parse_args(argv)
    for want in args.expect_torch:
        if not want.strip():
            p.error("--expect-torch: empty version (was the recorded base-image version file empty?)")
    checks = run(args.expect_torch, args.image, args.require_gpu, args.te_fused, args.graphs)
    print(report(checks))
    failed = [c.name for c in checks if c.status == "fail"]
    print(f"selfcheck: {'FAILED: ' + ', '.join(failed) if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

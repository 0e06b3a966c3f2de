"""Where a training step's time goes, for tools/bench_scale.py --profile: torch.profiler over a few
steps, time per class of work, GEMM time by shape, the top kernels, and a Chrome trace.

On CUDA it measures the GPU: CUDA activity, each kernel's device time (not the CPU time of its
launch), classed by the kernel's name; the GEMMs by shape are the aten GEMM ops' device time
(Transformer Engine's GEMMs are no aten ops: they count in the `gemm` class, not by shape). On CPU
the same report comes from each aten op's self CPU time, classed by the op's name. The classes:

    gemm         matrix multiplies (cuBLAS/cuBLASLt/CUTLASS kernels; aten::mm, addmm, bmm)
    attention    fused or flash attention, softmax
    optimizer    the optimizer's step (multi-tensor / foreach kernels, Adam)
    copy         copies, concatenations, transposes, memcpy/memset
    elementwise  pointwise and reduction kernels (activations, norms, casts, adds)
    other        everything else (communication kernels too)

Nothing here divides by a measured time without a guard: a class or a total of zero is reported
as zero, and a rate over it as None.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Callable
from typing import Any

CLASSES = ("gemm", "attention", "optimizer", "copy", "elementwise", "other")
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
_KERNEL_WORDS = (  # first match wins, in this order
    ("other", ("nccl",)),  # communication (none on one GPU)
    ("optimizer", ("adam", "multi_tensor", "foreach", "sgd_")),
    ("attention", ("flash", "fmha", "sdpa", "attention", "attn", "softmax")),
    ("gemm", ("gemm", "xmma", "cutlass", "cublas", "nvjet", "matmul", "splitk")),
    ("elementwise", ("_cast", "cast_", "quantize", "amax", "fp8")),  # TE's FP8 cast(+transpose) kernels
    ("copy", ("memcpy", "memset", "copy", "catarray", "transpose", "permute", "gather", "scatter", "index")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "reduce", "norm", "silu", "gelu", "swiglu", "rope",
                     "activation", "fill", "mul", "add", "div", "exp", "where")),
)
_COPY_OPS = {"aten::copy_", "aten::cat", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::stack",
             "aten::index", "aten::index_select", "aten::gather", "aten::scatter", "aten::embedding_dense_backward"}


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel (or memcpy/memset activity), from its name."""
    n = name.lower()
    for cls, words in _KERNEL_WORDS:
        if any(w in n for w in words):
            return cls
    return "other"


def op_class(name: str) -> str:
    """The class of a CPU-side operator (the CPU profile), from its name."""
    if name in GEMM_OPS:
        return "gemm"
    n = name.lower()
    if "scaled_dot_product" in n or "softmax" in n or "flash" in n:
        return "attention"
    if n.startswith("aten::_foreach") or "adam" in n or n.startswith("optimizer."):
        return "optimizer"
    if name in _COPY_OPS:
        return "copy"
    if n.startswith("aten::"):
        return "elementwise"
    return "other"


def summarize(rows: list[tuple[str, str, float]], gemm_shapes: list[tuple[str, str, float, int]], steps: int,
              activity: str) -> dict[str, Any]:
    """rows: (name, class, microseconds); gemm_shapes: (op, shapes, microseconds, calls). Per step,
    in seconds."""
    per: dict[str, float] = defaultdict(float)
    for _, cls, us in rows:
        per[cls] += us / 1e6 / steps
    total = sum(per.values())
    top = sorted(rows, key=lambda r: -r[2])[:15]
    return {
        "activity": activity, "steps": steps, "total_s": total,
        "classes": {c: per.get(c, 0.0) for c in CLASSES},
        "shares": {c: (per.get(c, 0.0) / total if total > 0 else 0.0) for c in CLASSES},
        "gemm_by_shape": [{"op": op, "shapes": shapes, "s": us / 1e6 / steps, "calls": calls // steps}
                          for op, shapes, us, calls in sorted(gemm_shapes, key=lambda g: -g[2])[:20]],
        "top": [{"name": name[:160], "class": cls, "s": us / 1e6 / steps} for name, cls, us in top],
    }


def time_rows(events: Any, cuda: bool, device_type: Any) -> list[tuple[str, str, float]]:
    """(name, class, microseconds) per profiler row: on CUDA each kernel's device time, leaving out
    user annotations (record_function ranges such as `Optimizer.step#AdamW.step` show on the GPU
    timeline too, spanning the kernels they enclose: counting them counted those kernels twice, as
    the first H200 profile did); on CPU each operator's self CPU time."""
    rows = []
    for e in events:
        if cuda and e.device_type == device_type.CUDA and not getattr(e, "is_user_annotation", False):
            rows.append((e.key, kernel_class(e.key), float(e.self_device_time_total)))
        elif not cuda and e.device_type == device_type.CPU and e.self_cpu_time_total > 0:
            rows.append((e.key, op_class(e.key), float(e.self_cpu_time_total)))
    return rows


def profile_steps(step: Callable[[], Any], *, steps: int, cuda: bool, trace: str | None = None) -> dict[str, Any]:
    """Run `step` `steps` times under torch.profiler (CPU activity, and CUDA where `cuda`); the
    report of `summarize`, and the Chrome trace gzip'd at `trace` (+ .gz) where given."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
    rows = time_rows(prof.key_averages(), cuda, DeviceType)
    shapes = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key in GEMM_OPS:
            us = float(e.self_device_time_total if cuda else e.self_cpu_time_total)
            if cuda and us == 0:  # the op launched no kernel itself: its child's row carries the time
                us = float(e.device_time_total)
            shapes.append((e.key, str(e.input_shapes), us, e.count))
    out = summarize(rows, shapes, steps, "cuda" if cuda else "cpu")
    if trace:
        os.makedirs(os.path.dirname(trace) or ".", exist_ok=True)
        prof.export_chrome_trace(trace)
        with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(trace)
        out["trace"] = trace + ".gz"
    return out


def rate(flop: float, seconds: float) -> float | None:
    """FLOP per second, or None where the time is zero (nothing measured there)."""
    return flop / seconds if seconds > 0 else None


def device_info(device: str) -> dict[str, Any]:
    """Which card (or CPU) produced the numbers."""
    import platform

    import torch

    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        return {"device": "cuda", "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}", "torch": torch.__version__, "cuda": torch.version.cuda}
    name = platform.processor() or "cpu"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    return {"device": "cpu", "name": name, "cores": os.cpu_count(), "torch": torch.__version__}


def write_json(path: str | None, report: dict[str, Any]) -> None:
    """The report as JSON at `path`, whole or not at all (a temporary file renamed)."""
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, path)

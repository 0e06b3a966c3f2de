"""Benchmark SCALE against Megatron's own dense layers: step time, tokens/s, peak memory, bytes of
gradients and optimizer state, each beside its FLOP prediction (megatron_scale/model/flops.py).

    OMP_NUM_THREADS=2 python tools/bench_scale.py --out results/DATE-bench-cpu/bench.json   # CPU, fp32
    python tools/bench_scale.py --device cuda --bf16 --peak-tflops 989                   # GPU, + MFU
    python tools/bench_scale.py --device cuda --bf16 --transformer-impl transformer_engine \
        --fp8-format hybrid --fp8-recipe delayed --peak-tflops 1979                      # H100, FP8

Methods: full_ft (megatron-core's GPT layer spec at the base shape, everything trained; the local
spec, or with --transformer-impl transformer_engine megatron-core's TE spec),
dense_up (the same at the expanded shape d+d', h+h', g+g', f+f'), preserve and adapt (the SCALE
model at the expanded shape; adapt has W12 in attention, in the one layer of the layer scope and in
the upper half of the model's layers; preserve skips the backward through its frozen base stream,
the library's default, and preserve_full is Preserve with --scale-base-backward full, issue 62). Scopes: `layer` (one TransformerLayer, input [s, b, d]
requiring grad) and `model` (GPTModel with embedding and output layer, untied, loss = mean
cross-entropy). A step is forward + backward + AdamW step. The methods of a scope are timed in one
process with their steps interleaved round-robin (a burst of load elsewhere hits all alike); the
step time is the median of --repeats steps after --warmup, wall clock and process CPU time. Peak
memory is measured per (scope, method) in a process of its own: RSS above the process's size before
the model is built (on GPU, max_memory_allocated). With --isolate (the default on CUDA) each method
is instead timed alone in a process of its own, its peak memory measured there: one model's state
alive at a time, so the Llama-1B shape fits an 80 GB H100. `--route` times SCALE-Route's
statistics: the C++ op (megatron_scale._C) against its PyTorch twin. `--profile` adds, per method,
where two steps' time goes (tools/bench_profile.py: on CUDA each kernel's device time, by class:
GEMM by shape, attention, elementwise, copies, optimizer) and the FLOP-model FLOPs per GEMM
second; --trace-dir keeps a gzip'd Chrome trace per method. The JSON (--out) names the device
each number came from (the GPU's name and memory, or the CPU's), and is written when the run
starts, after each scope and at the end, each time whole (never a half-written file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import bench_profile  # tools/bench_profile.py: run as a script, this file's folder is sys.path[0]

METHODS = ("full_ft", "dense_up", "preserve", "adapt", "preserve_rows", "preserve_gate", "preserve_full")
# preserve_full (issue 62): Preserve with --scale-base-backward full, the backward through the frozen base
# stream computed as before; preserve and its variants skip it (the library's default, auto)
FULL_BACKWARD = ("preserve_full", "adapt")
# issue 45's variants of Preserve, model scope only (both act on the output layer): the gate at the
# biography setting; the rows a script's share of SmolLM2's (89 of 49,152, every 552nd row here)
VARIANTS = {"preserve_rows": {}, "preserve_gate": {"gate_statistic": "max-prob", "gate_tau": 0.8, "gate_temperature": 0.05}}
ROW_STRIDE = 552


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _architecture(a: argparse.Namespace, layers: int, up: bool) -> Any:
    """The benchmark's model (untied, RoPE), at the base shape or, `up`, at the expanded one
    (d + d/4, h + h/4, g + max(1, g/4), f + f/4; the head size stays the base's)."""
    from megatron_scale.model.args import LlamaArgs

    def grown(n: int, floor: int = 0) -> int:
        return n + (max(floor, n // 4) if up else 0)

    return LlamaArgs(
        num_layers=layers, hidden_size=grown(a.hidden), num_attention_heads=grown(a.heads),
        num_query_groups=grown(a.groups, 1), ffn_hidden_size=grown(a.ffn), kv_channels=a.hidden // a.heads,
        vocab_size=a.vocab, max_position_embeddings=a.seq, params_dtype="bfloat16" if a.bf16 else "float32",
    )


FUSIONS = ("rope", "swiglu", "ce")
"""--fusions: megatron-core's RoPE (TE's kernel), SwiGLU and native cross-entropy fusions."""


def _fusions(a: argparse.Namespace) -> Any:
    from megatron_scale.model.args import Fusions

    given = set(a.fusions or ())
    return Fusions(rope="rope" in given, swiglu="swiglu" in given, cross_entropy="ce" in given)


def _build(a: argparse.Namespace, scope: str, method: str) -> Any:
    """The model of one (scope, method), through the library's one builder."""
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.build import Kernels, build_model
    from megatron_scale.methods import Full, Scale

    layers = 1 if scope == "layer" else a.layers
    kernels = Kernels(transformer_impl=a.transformer_impl, attention_backend=a.attention_backend,
                      fp8_format=a.fp8_format, fp8_recipe=a.fp8_recipe, initialize=True,
                      cpu_initialization=a.device == "cpu", te_linear=a.scale_te_linear or "modules",
                      local_linear=a.scale_local_linear, fusions=_fusions(a))
    if method in ("full_ft", "dense_up"):
        return build_model(_architecture(a, layers, up=method == "dense_up"), Full(), kernels=kernels)
    adapt = tuple(range(layers // 2, layers)) if method == "adapt" else None
    scale = ScaleConfig(variant="adapt" if method == "adapt" else "preserve", init="normal", adapt_layers=adapt,
                        base_backward="full" if method == "preserve_full" else "auto", **VARIANTS.get(method, {}))
    args = _architecture(a, layers, up=False)
    model = build_model(args, Scale.of(scale, args), kernels=kernels)
    if method == "preserve_rows":
        import torch

        from megatron_scale.model.layers.heads import output_layers
        from megatron_scale.model.layers.output_rows import scope_output_rows

        layers = output_layers(model)
        scope_output_rows(layers, torch.arange(layers[0].vocab_local * layers[0].tp_size) % ROW_STRIDE == 0)
    return model


def _setup(a: argparse.Namespace, scope: str, method: str) -> tuple[Any, Any, list[Any], Any]:
    """Build one (scope, method): (module timed, loss closure, trainable params, AdamW)."""
    import torch

    from megatron_scale import _mcore as mc
    from megatron_scale.model.inputs import causal_mask

    torch.manual_seed(0)
    model = _build(a, scope, method).to(a.run_device)
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    s, b = a.seq, a.batch
    mask = causal_mask(s, a.run_device)
    if scope == "layer":
        module = model.decoder.layers[0]
        width = module.config.hidden_size
        x = torch.randn(s, b, width, dtype=dtype, device=a.run_device, requires_grad=True)
        grad_out = torch.randn(s, b, width, dtype=dtype, device=a.run_device)

        # A block enters FP8 autocast around each layer; a layer called alone needs it here.
        fp8_context = mc.te_extensions().get_fp8_context if a.fp8_format else lambda _: contextlib.nullcontext()

        def loss_fn() -> Any:
            with fp8_context(module.config):
                out, _ = module(hidden_states=x, attention_mask=mask)
            return (out * grad_out).sum()

    else:
        module = model
        ids = torch.randint(0, a.vocab, (b, s + 1), device=a.run_device)
        pos = torch.arange(s, device=a.run_device).expand(b, s)

        def loss_fn() -> Any:
            return model(ids[:, :-1], pos, mask, labels=ids[:, 1:]).float().mean()

    params = [p for p in module.parameters() if p.requires_grad]
    opt = _optimizer(a, module, params)

    def step_fn() -> Any:
        # megatron-core's schedule does this on each step's first microbatch (FP8 weight casts)
        if a.fp8_format and hasattr(module, "set_is_first_microbatch"):
            module.set_is_first_microbatch()
        return loss_fn()

    return module, step_fn, params, opt


class _MegatronOptimizer:
    """--optimizer megatron: the training entry's own (training/optim.py build_optimizer over
    megatron-core's DDP: fp32 gradient buffers, fp32 main parameters under --bf16, TE's FusedAdam
    where TE is installed), behind torch's zero_grad / step."""

    def __init__(self, a: argparse.Namespace, module: Any) -> None:
        import torch

        from megatron_scale import _mcore as mc
        from megatron_scale.training.optim import OptimConfig, build_optimizer

        self.ddp = mc.DistributedDataParallel(
            module.config, mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True), module=module)
        self.opt = build_optimizer(OptimConfig(lr=1e-5, clip_grad=1.0), self.ddp, bf16=a.bf16,
                                   params_dtype=torch.bfloat16 if a.bf16 else torch.float32, distributed=False)
        self.param_groups = self.opt.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.ddp.zero_grad_buffer()
        self.opt.zero_grad()

    def step(self) -> None:
        self.ddp.finish_grad_sync()
        self.opt.step()

    def state_bytes(self) -> int:
        """Adam's moments and the fp32 main parameters (where they are copies: --bf16), in bytes."""
        import torch

        own = {p.data_ptr() for p in self.ddp.module.parameters()}
        tensors = [v for st in self.opt.optimizer.state.values() for v in st.values() if torch.is_tensor(v) and v.dim()]
        tensors += [p for g in self.opt.optimizer.param_groups for p in g["params"] if p.data_ptr() not in own]
        return sum(t.numel() * t.element_size() for t in tensors)

    def grad_bytes(self) -> int:
        """DDP's fp32 gradient buffers (main_grad), in bytes."""
        return sum(b.grad_data.numel() * b.grad_data.element_size() for b in self.ddp.buffers)


def _optimizer(a: argparse.Namespace, module: Any, params: list[Any]) -> Any:
    import torch

    if a.optimizer == "megatron":
        return _MegatronOptimizer(a, module)
    return torch.optim.AdamW(params, lr=1e-5, foreach=True, capturable=a.cuda_graph == "step")


def _work(a: argparse.Namespace, loss_fn: Any, opt: Any) -> None:
    """One optimizer step over --microbatches forward/backward passes (gradients accumulate)."""
    opt.zero_grad(set_to_none=a.cuda_graph != "step")
    for _ in range(a.microbatches):
        loss_fn().backward()
    opt.step()


class _Graphed:
    """--cuda-graph step: the whole step (every microbatch and AdamW, capturable) captured once by
    torch after three eager steps on a side stream, then replayed (torch's whole-network capture)."""

    def __init__(self, a: argparse.Namespace, loss_fn: Any, opt: Any) -> None:
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                _work(a, loss_fn, opt)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _work(a, loss_fn, opt)

    def replay(self) -> None:
        self.graph.replay()


def _step(a: argparse.Namespace, loss_fn: Any, opt: Any, graphed: Any = None) -> tuple[float, float, float, float | None]:
    """One training step: (wall seconds, process CPU seconds, host seconds to the step's return,
    device seconds between CUDA events around it, None on CPU)."""
    import torch

    cuda = a.device == "cuda"
    start = end = None
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t, c = time.perf_counter(), time.process_time()
    if graphed is not None:
        graphed.replay()
    else:
        _work(a, loss_fn, opt)
    host = time.perf_counter() - t
    if cuda:
        end.record()
        torch.cuda.synchronize()
    device = start.elapsed_time(end) / 1e3 if cuda else None
    return time.perf_counter() - t, time.process_time() - c, host, device


def _init(a: argparse.Namespace) -> None:
    from megatron_scale.distributed import init_distributed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + os.getpid() % 20000))
    a.run_device = init_distributed(1, 1, device=a.device, seed=1234)  # where models and inputs go



def _time_worker(a: argparse.Namespace, methods: list[str] | None = None) -> list[dict[str, Any]]:
    """Every method of one scope in one process, their steps interleaved round-robin, so a burst
    of load from elsewhere on the machine lands on all of them alike; or (`methods`, --isolate)
    the one method given, its peak memory measured in the same process."""
    import torch

    _init(a)
    rss0 = _rss_kib("VmRSS")
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    built = {m: _setup(a, a.scope, m) for m in (methods or _methods(a))}
    graphs = {m: _Graphed(a, fn, opt) if a.cuda_graph == "step" else None for m, (_, fn, _, opt) in built.items()}
    for _ in range(a.warmup):
        for m, (_, loss_fn, _, opt) in built.items():
            _step(a, loss_fn, opt, graphs[m])
    walls: dict[str, list[float]] = {m: [] for m in built}
    cpus: dict[str, list[float]] = {m: [] for m in built}
    hosts: dict[str, list[float]] = {m: [] for m in built}
    devices: dict[str, list[float]] = {m: [] for m in built}
    for _ in range(a.repeats):
        for m, (_, loss_fn, _, opt) in built.items():
            w, c, h, d = _step(a, loss_fn, opt, graphs[m])
            walls[m].append(w)
            cpus[m].append(c)
            hosts[m].append(h)
            if d is not None:
                devices[m].append(d)
    peak = torch.cuda.max_memory_allocated() if a.device == "cuda" else (_rss_kib("VmHWM") - rss0) * 1024
    prof = _profile(a, built) if a.profile else {}
    device = bench_profile.device_info(a.device)
    out = []
    for m, (module, _, params, opt) in built.items():
        out.append({**({"gemm_s": prof[m]["classes"]["gemm"], "profile": prof[m]} if prof else {}),
            **({"peak_bytes": peak} if methods else {}), "device": device,
            "scope": a.scope, "method": m, "base_backward": "skip" if _skips(m) else "full",
            "step_s": statistics.median(walls[m]), "times_s": walls[m],
            "cpu_s": statistics.median(cpus[m]), "tokens": a.seq * a.batch * a.microbatches,
            "host_s": statistics.median(hosts[m]), "device_s": statistics.median(devices[m]) if devices[m] else None,
            "grad_bytes": opt.grad_bytes() if hasattr(opt, "grad_bytes") else sum(
                p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
            "optimizer_bytes": opt.state_bytes() if hasattr(opt, "state_bytes") else sum(
                v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                if torch.is_tensor(v) and v.dim() > 0
            ),
            "trainable": sum(p.numel() for p in params),
            "frozen": sum(p.numel() for p in module.parameters() if not p.requires_grad),
        })
    return out


def _profile(a: argparse.Namespace, built: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per method: where two steps' time goes (tools/bench_profile.py), a trace per method in
    --trace-dir."""
    out = {}
    for m, (_, loss_fn, _, opt) in built.items():
        trace = os.path.join(a.trace_dir, f"{a.scope}_{m}.json") if a.trace_dir else None
        out[m] = bench_profile.profile_steps(lambda loss_fn=loss_fn, opt=opt: _step(a, loss_fn, opt), steps=2, cuda=a.device == "cuda",
                                             trace=trace)
    return out


def _memory_worker(a: argparse.Namespace) -> dict[str, Any]:
    """Peak memory of one (scope, method) over two steps, alone in its process."""
    import torch

    _init(a)
    rss0 = _rss_kib("VmRSS")
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    _, loss_fn, _, opt = _setup(a, a.scope, a.method)
    for _ in range(2):
        _step(a, loss_fn, opt)
    peak = torch.cuda.max_memory_allocated() if a.device == "cuda" else (_rss_kib("VmHWM") - rss0) * 1024
    return {"scope": a.scope, "method": a.method, "peak_bytes": peak}


def _run(argv: list[str], *extra: str) -> Any:
    cmd = [sys.executable, os.path.abspath(__file__), *argv, *extra]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_scale: the worker {' '.join(extra)} failed (exit {r.returncode}):\n"
                         + "\n".join(r.stderr.strip().splitlines()[-15:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def _shape(a: argparse.Namespace) -> Any:
    from megatron_scale.model.flops import Shape

    return Shape(
        hidden=a.hidden, heads=a.heads, groups=a.groups, head_dim=a.hidden // a.heads, ffn=a.ffn,
        hidden_up=a.hidden // 4, heads_up=a.heads // 4, groups_up=max(1, a.groups // 4), ffn_up=a.ffn // 4,
    )


def _skips(method: str) -> bool:
    """Whether a method's backward skips the frozen base stream (issue 62)."""
    return method.startswith("preserve") and method not in FULL_BACKWARD


def _predicted(a: argparse.Namespace, scope: str, method: str, skip: bool | None = None) -> int:
    """The FLOP model's count for one step of `method`; `skip` (default: what this bench runs) says
    whether the base stream's backward is skipped."""
    from megatron_scale.model import flops

    shape = _shape(a)
    skip = _skips(method) if skip is None else skip
    # the gate's statistic and the rows' hook: O(V) per token
    method = "preserve" if method in VARIANTS or method == "preserve_full" else method
    if scope == "layer":
        return flops.layer_flops(method, shape, a.seq, skip_base_backward=skip)
    return flops.model_flops(method, shape, a.seq, a.layers, a.vocab, adapt_layers=a.layers - a.layers // 2,
                             skip_base_backward=skip)


def mfu(a: argparse.Namespace, scope: str, method: str, r: dict[str, Any], causal: bool = False) -> float:
    """Model FLOPs utilisation of one timed row: the FLOP model's FLOPs per second over --peak-tflops
    (attention over the full s x s; `causal`: that term halved, Megatron-LM's convention). The
    row's own `base_backward` says what ran; a file written before issue 62 has none, and its
    Preserve ran the full backward (there was no skip)."""
    from megatron_scale.model import flops

    predicted = _predicted(a, scope, method, skip=r.get("base_backward", "full") == "skip")
    if causal:
        shape = _shape(a)
        heads = shape.heads + (shape.heads_up if method not in ("full_ft",) else 0)
        predicted -= (1 if scope == "layer" else a.layers) * flops.attention(a.seq, heads, shape.head_dim) / 2
    return predicted * r["tokens"] / r["step_s"] / (a.peak_tflops * 1e12)


def _route_bench(a: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from megatron_scale.route_stats.sums import extension, route_statistics_cpp, route_statistics_torch

    if extension() is None:
        raise SystemExit("bench_scale --route: megatron_scale._C is not built (pip install -e .)")
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        z_p = torch.randn(a.seq * a.batch, a.vocab, generator=g).to(dtype)
        z_a = (z_p.float() + 0.1 * torch.randn(z_p.shape, generator=g)).to(dtype)
        res = {}
        for name, fn in (("twin", route_statistics_torch), ("cpp", route_statistics_cpp)):
            fn(z_p, z_a)
            ts = []
            for _ in range(max(5, a.repeats)):
                t = time.perf_counter()
                fn(z_p, z_a)
                ts.append(time.perf_counter() - t)
            res[name] = statistics.median(ts)
        # relative to the scale of the sums, |z_p| |z_a| per token (the twin's own rounding is ~1e-7)
        scale = z_p.float().norm(dim=-1) * z_a.float().norm(dim=-1)
        diff = ((route_statistics_cpp(z_p, z_a) - route_statistics_torch(z_p, z_a)).abs() / scale).max().item()
        rows.append({"dtype": str(dtype).removeprefix("torch."), "tokens": z_p.shape[0], "vocab": a.vocab,
                     "twin_s": res["twin"], "cpp_s": res["cpp"], "speedup": res["twin"] / res["cpp"],
                     "max_rel_diff": diff})
    return rows


def _methods(a: argparse.Namespace) -> list[str]:
    """The dense references of --refs (both by default) first: the ratios are against them."""
    return list(a.refs) + [m for m in a.methods if m not in ("full_ft", "dense_up")]


def _table(a: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    """Markdown: per (scope, method) the measurements, then each ratio beside its FLOP prediction.
    `vs X` = this method's per-step cost over X's; `meas./pred.` = measured wall ratio over the
    FLOP ratio against the dense expanded model (the issue's 1.15x criterion)."""
    by = {(r["scope"], r["method"]): r for r in results}
    with_mfu = a.device == "cuda" and a.peak_tflops
    head = ("| scope | method | step s | CPU s | tokens/s | peak MiB | grad MiB | Adam MiB "
            "| vs full FT: FLOPs / wall | vs dense expanded: FLOPs / wall / CPU | meas./pred. |")
    lines = [head + (" MFU |" if with_mfu else ""), "|---" * (11 + bool(with_mfu)) + "|"]
    mib = 2.0**20
    for scope in a.scopes:
        ft, up = by.get((scope, "full_ft")), by.get((scope, "dense_up"))
        for m in _methods(a):
            r = by[(scope, m)]
            p = _predicted(a, scope, m)
            vs_ft = vs_up = ratio = "-"
            if ft is not None:
                vs_ft = f"{p / _predicted(a, scope, 'full_ft'):.3f} / {r['step_s'] / ft['step_s']:.3f}"
            if up is not None:
                pu, wu = p / _predicted(a, scope, "dense_up"), r["step_s"] / up["step_s"]
                vs_up, ratio = f"{pu:.3f} / {wu:.3f} / {r['cpu_s'] / up['cpu_s']:.3f}", f"{wu / pu:.3f}"
            lines.append(
                f"| {scope} | {m} | {r['step_s']:.3f} | {r['cpu_s']:.3f} | {r['tokens'] / r['step_s']:.0f} "
                f"| {r['peak_bytes'] / mib:.0f} | {r['grad_bytes'] / mib:.1f} | {r['optimizer_bytes'] / mib:.1f} "
                f"| {vs_ft} | {vs_up} | {ratio} |"
            )
            if with_mfu:
                r["mfu"], r["mfu_causal"] = mfu(a, scope, m, r), mfu(a, scope, m, r, causal=True)
                lines[-1] += f" {r['mfu']:.3f} |"
    return "\n".join(lines)


def _check_flags(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Flag combinations that cannot run stop here, naming the flag (the training entry's check)."""
    from megatron_scale.model.layers.te import check_te_flags

    if a.scale_local_linear != "fused" and a.transformer_impl != "local":
        ap.error(f"--scale-local-linear {a.scale_local_linear} needs --transformer-impl local "
                 "(on Transformer Engine: --scale-te-linear fused)")
    try:
        check_te_flags(a.transformer_impl, a.fp8_format, a.fp8_recipe, a.bf16, a.device)
    except ValueError as e:
        ap.error(str(e))
    if a.microbatches < 1:
        ap.error(f"--microbatches {a.microbatches}: must be >= 1")
    bad = sorted(set(a.fusions) - set(FUSIONS))
    if bad:
        ap.error(f"--fusions {','.join(bad)}: choose from {','.join(FUSIONS)}")
    if a.fusions and a.device != "cuda":
        ap.error(f"--fusions {','.join(a.fusions)}: megatron-core compiles its fused kernels with torch.compile, "
                 "which does not run on this project's CPU backend; it needs --device cuda")
    if "rope" in a.fusions and a.transformer_impl != "transformer_engine":
        ap.error("--fusions rope runs Transformer Engine's fused RoPE: it needs --transformer-impl transformer_engine")
    if a.scale_te_linear is not None and a.transformer_impl != "transformer_engine":
        ap.error(f"--scale-te-linear {a.scale_te_linear} needs --transformer-impl transformer_engine")
    if a.scale_te_linear == "fused" and a.fp8_format:
        ap.error("--scale-te-linear fused runs bf16 only so far: FP8 needs --scale-te-linear modules")
    if a.cuda_graph == "step" and a.device != "cuda":
        ap.error("--cuda-graph step captures a CUDA graph: it needs --device cuda")
    if a.cuda_graph == "step" and a.optimizer == "megatron":
        ap.error("--cuda-graph step with --optimizer megatron: megatron-core's optimizer step reads the gradient "
                 "norm on the host (not capturable); the training entry's --cuda-graph-impl full_iteration graphs "
                 "forward and backward only")
    if a.cuda_graph == "step" and a.profile:
        ap.error("--cuda-graph step with --profile: a replayed graph shows as one launch; profile without it")
    variants = sorted(set(a.methods) & set(VARIANTS))
    if variants and "layer" in a.scopes:
        ap.error(f"--methods {' '.join(variants)}: the variants act on the output layer; give --scopes model")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=4, help="layers of the model scope")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--scopes", nargs="+", default=["layer", "model"], choices=["layer", "model"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--refs", nargs="+", default=["full_ft", "dense_up"], choices=["full_ft", "dense_up"],
                    help="the dense references run first (default both; the table's ratios need them)")
    ap.add_argument("--route", action="store_true", help="also time the C++ route op against its twin")
    ap.add_argument("--profile", action="store_true",
                    help="also profile two steps per method: seconds in GEMMs, and FLOP-model FLOPs per GEMM second")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--bf16", action="store_true", help="bf16 parameters and activations (GPU mode)")
    ap.add_argument("--transformer-impl", choices=["local", "transformer_engine"], default="local",
                    help="transformer_engine: SCALE's TE linears and TE attention, megatron-core's TE spec for the dense references")
    ap.add_argument("--attention-backend", choices=["auto", "local", "sdpa"], default="auto",
                    help="core attention of the local path: auto (SDPA on CUDA, megatron-core's local on CPU), "
                         "sdpa, local (model/layers/sdpa.py)")
    ap.add_argument("--fp8-format", choices=["hybrid", "e4m3"], default=None,
                    help="FP8 through Transformer Engine (GPU mode; needs --transformer-impl transformer_engine and --bf16)")
    ap.add_argument("--fp8-recipe", choices=["delayed", "tensorwise"], default=None, help="with --fp8-format; default delayed")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (H100 SXM bf16: 989)")
    ap.add_argument("--optimizer", choices=["adamw", "megatron"], default="adamw",
                    help="adamw: torch AdamW (foreach) on the parameters; megatron: the training entry's optimizer "
                         "(training/optim.py over megatron-core's DDP: fp32 grads, fp32 main params with --bf16)")
    ap.add_argument("--microbatches", type=int, default=1,
                    help="forward/backward passes per optimizer step (gradient accumulation); tokens count all")
    ap.add_argument("--cuda-graph", choices=["none", "step"], default="none",
                    help="step: the whole step captured by torch and replayed (CUDA, --optimizer adamw)")
    ap.add_argument("--fusions", type=lambda v: tuple(x for x in v.split(",") if x), default=(),
                    help=f"comma-separated, of {','.join(FUSIONS)}: megatron-core's fusions (rope needs TE)")
    ap.add_argument("--scale-local-linear", choices=["fused", "planar"], default="fused",
                    help="SCALE's local linears: fused (fused.py) | planar (te_fused.py's one-node composition over "
                         "torch ops, the residual stream planar: torch_ops.py)")
    ap.add_argument("--scale-te-linear", choices=["modules", "fused"], default=None,
                    help="SCALE's TE linears (with --transformer-impl transformer_engine): modules (te_linear.py) "
                         "| fused (te_fused.py, one node per upscaled linear)")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="time each method alone in a process of its own, one model's state alive at a time "
                         "(default: on with --device cuda, off on CPU, where interleaving evens out load)")
    ap.add_argument("--trace-dir", default=None, help="with --profile: a gzip'd Chrome trace per (scope, method) here")
    ap.add_argument("--out", default=None, help="write every measurement as JSON here")
    ap.add_argument("--scope", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    _check_flags(ap, a)
    if a.isolate is None:
        a.isolate = a.device == "cuda"
    if a.scope and a.method and a.alone:  # worker processes
        print(json.dumps(_time_worker(a, [a.method])))
        return
    if a.scope and a.method:
        print(json.dumps(_memory_worker(a)))
        return
    if a.scope:
        print(json.dumps(_time_worker(a)))
        return
    argv = list(argv if argv is not None else sys.argv[1:])
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "args": {k: v for k, v in vars(a).items() if k not in ("scope", "method", "alone")},
        "threads": os.environ.get("OMP_NUM_THREADS"), "loadavg": open("/proc/loadavg").read().split()[:3],
        "status": "running", "results": results,
    }
    bench_profile.write_json(a.out, report)  # before anything that can fail: a run cut short still says what it was
    for scope in a.scopes:
        if a.isolate:
            timed = [_run(argv, "--scope", scope, "--method", m, "--alone")[0] for m in _methods(a)]
        else:
            timed = _run(argv, "--scope", scope)
            for r in timed:
                r.update(_run(argv, "--scope", scope, "--method", r["method"]))
        for r in timed:
            print(f"{scope:5s} {r['method']:8s} {r['step_s']:.3f} s/step", file=sys.stderr, flush=True)
        results += timed
        report["device"] = results[0]["device"]
        bench_profile.write_json(a.out, report)
    report["status"] = "done"
    bench_profile.write_json(a.out, report)
    print(f"device: {report['device']['name']}")
    print(_table(a, results))
    if a.profile:
        print(_profile_table(a, results))
    if a.route:
        report["route"] = _route_bench(a)
        print("\n| dtype | tokens x vocab | twin ms | C++ ms | speed-up | max diff / (|z_p||z_a|) |\n|---|---|---|---|---|---|")
        for r in report["route"]:
            print(f"| {r['dtype']} | {r['tokens']} x {r['vocab']} | {r['twin_s'] * 1e3:.2f} | {r['cpp_s'] * 1e3:.2f} "
                  f"| {r['speedup']:.2f}x | {r['max_rel_diff']:.1e} |")
        bench_profile.write_json(a.out, report)



def _profile_table(a: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    """Markdown: per (scope, method) the profiled seconds per step by class, and FLOP-model
    FLOPs per GEMM second (None, printed '-', where no GEMM time was measured)."""
    cls = bench_profile.CLASSES
    lines = [f"\n{results[0]['profile']['activity'].upper()} time per step (profiled, 2 steps)",
             "| scope | method | step s | profiled s | " + " | ".join(f"{c} s" for c in cls) + " | GEMM TFLOP/s |",
             "|---" * (5 + len(cls)) + "|"]
    for r in results:
        p = r["profile"]
        flop = bench_profile.rate(_predicted(a, r["scope"], r["method"]) * r["tokens"], p["classes"]["gemm"])
        lines.append(f"| {r['scope']} | {r['method']} | {r['step_s']:.3f} | {p['total_s']:.3f} | "
                     + " | ".join(f"{p['classes'][c]:.4f}" for c in cls)
                     + f" | {'-' if flop is None else f'{flop / 1e12:.1f}'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

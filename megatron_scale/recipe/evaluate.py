"""The recipe's steps after training: the router sweep, the held-out sets' bytes, the benchmarks,
the report, the greedy generations and lm-eval. Each is done when the file it writes is current
(megatron_scale/artifacts.py), so a second submission into the same WORKDIR or a requeued job
skips it; the tools that run them and the reports that read their files are named in each.
Standard library only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from megatron_scale import artifacts
from megatron_scale.recipe.array import why_missing
from megatron_scale.recipe.command import Command, single
from megatron_scale.recipe.layout import Layout, last_ckpt, run_name
from megatron_scale.recipe.settings import SettingsError


def route_sweep(r: Layout) -> Command | str:
    """The routing method's router at every tau of every statistic, from one pass over the first
    ROUTE_SWEEP_SAMPLES windows of the held-out English and Korean sets; tau calibrated on the
    next as many windows (held out from the evaluated ones), a decision per ROUTE_UNIT (each
    unit deciding by its first token, as the model does), and ROUTE_STATISTIC's calibrated
    router saved as the run's calibrated checkpoint. Done when sweep.json records the run's
    last checkpoint and these settings."""
    s, out, load = r.s, r.sweep(), last_ckpt(r.run_dir(str(r.router)))
    n = s.route_sweep_samples
    units = [s.route_unit] + (["token"] if s.route_unit != "token" else [])
    want = {"load": str(load), "samples": n, "seq_length": s.seq_length, "keep_old": s.route_keep_old,
            "min_new_adapt": s.route_min_new_adapt, "calibration_skip": n, "direction": "auto",
            "units": units, "pool": "first", "calibrate_with": s.route_statistic, "save": str(r.calibrated())}
    if artifacts.SWEEP.current(out, want) and r.calibrated().is_dir():
        return f"swept: {out}"
    # The calibrated checkpoint is an output too: one left without a current sweep.json (a run
    # stopped between the two, or a sweep with other settings) is cleared before the sweep runs
    # again, which would refuse to overwrite it (found by tools/recipe_kill_trials.py).
    command = replace(_sweep_command(r, load, out, n, units), outputs=(str(r.calibrated()),))
    if r.calibrated().exists():
        return replace(command, note=f"{r.calibrated()}: left without a current {out} (a run stopped while "
                                     "sweeping, or other settings); sweeping again")
    return command


def _sweep_command(r: Layout, load: Path, out: Path, n: int, units: list[str]) -> Command:
    s = r.s
    return single("tools/route_sweep.py", "--load", load, "--old-data", f"en={r.en_eval}",
                  "--new-data", f"ko={r.ko_eval}", "--out", out.parent, "--seq-length", s.seq_length,
                  "--samples", n, "--batch-size", s.micro_batch, "--tensor-model-parallel-size", s.tp,
                  "--keep-old", s.route_keep_old, "--min-new-adapt", s.route_min_new_adapt,
                  "--calibration-old-data", r.en_eval, "--calibration-new-data", r.ko_eval,
                  "--calibration-skip", n, "--route-units", *units, "--route-pool", "first",
                  *(["--tokenizer", r.tokenizer] if s.route_unit != "token" else []),
                  "--calibrate-with", s.route_statistic, "--save", r.calibrated())


def text_bytes(r: Layout) -> Command | str:
    """Tokens, UTF-8 bytes and characters of each held-out set: the report turns every
    evaluation's per-token loss on them into bits per byte. Done when text_bytes.json records
    these sets and tokenizer."""
    out, sets = artifacts.TEXT_BYTES.path(r.s.workdir), r.held_out()
    if artifacts.TEXT_BYTES.current(out, r.tokenizer, sets):
        return f"held-out bytes counted: {out}"
    return single("tools/text_bytes.py", "--tokenizer-model", r.tokenizer,
                  *(a for n, p in sets.items() for a in ("--data", f"{n}={p}")), "--output", out)


def benchmark(r: Layout, name: str) -> Command | str:
    """BENCHMARKS on the base's checkpoint (name "base") or a method's last one. Done when its
    JSON records that checkpoint, the tasks and the limit."""
    s = r.s
    ckpt = r.base() if name == "base" else r.final(name)
    out = artifacts.BENCHMARK.path(s.workdir, model=name)
    limit = s.benchmark_limit or None
    if artifacts.BENCHMARK.current(out, str(ckpt), s.benchmarks.split(","), limit):
        return f"benchmarks scored: {out}"
    return single("tools/eval_benchmarks.py", "--load", ckpt, "--tokenizer", r.tokenizer,
                  "--tasks", s.benchmarks, *(["--limit", limit] if limit else []),
                  "--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp, "--output", out)


def report(r: Layout) -> Command | str:
    """The finished runs, and why the others are missing (an ARRAY=1 task that failed). The
    base's numbers: the tiny base's last evaluation, or (converted base) the first finished
    method's iteration-0 evaluation, made before its first step. Skipped when results.json
    covers the same runs and failures and is newer than every input (a second submission
    into the same WORKDIR, a requeue: delete report/ to have it written again)."""
    s, done = r.s, r.finished()
    failed = [a for m in s.methods if m not in done for a in ("--failed", f"{m}={why_missing(s, m)}")]
    if not done:
        raise SettingsError("no method finished its run: " + "; ".join(failed[1::2]))
    metrics = {m: artifacts.METRICS.path(s.workdir, method=run_name(m, s.seed)) for m in done}
    if s.from_scratch:
        base = ["--base", str(r.base_run / artifacts.METRICS.name)]
    else:
        base = ["--base", str(metrics[done[0]]), "--base-iteration", "0"]
    runs = [a for m in done for a in ("--run", f"{m}={metrics[m]}")] + failed
    old = [a for name in ("en", *r.extra) if name not in r.new_extra for a in ("--old", name)]
    old += [a for name in ("ko", *r.new_extra) for a in ("--new", name)] if r.new_extra else []
    sweep = ["--route-sweep", r.sweep()] if r.router in done else []
    bench = {m: artifacts.BENCHMARK.path(s.workdir, model=m) for m in ("base", *done)} if s.benchmarks else {}
    sizes = artifacts.TEXT_BYTES.path(s.workdir)
    inputs = [Path(base[1]), *metrics.values(), *map(Path, sweep[1:]), sizes, *bench.values()]
    results = artifacts.RESULTS.path(s.workdir)
    if artifacts.RESULTS.current(results, done, dict(f.split("=", 1) for f in failed[1::2]), inputs):
        return f"report up to date: {artifacts.REPORT.path(s.workdir)}"
    return single("tools/scale_report.py", *base, *runs, "--text-bytes", sizes,
                  *(a for m, p in bench.items() for a in ("--benchmarks", f"{m}={p}")), *old,
                  "--output", results.parent, *sweep)


def samples(r: Layout) -> Command | str:
    """Greedy English and Korean continuations of the HF base (when there is one) and every export.
    Skipped when generations.json holds these models and is newer than each one's config.json."""
    s = r.s
    folders = ({} if s.from_scratch else {"base": Path(s.hf_model)}) | {
        m: r.hf(m) for m in r.finished()}
    out = artifacts.GENERATIONS.path(s.workdir)
    if artifacts.GENERATIONS.current(out, folders):
        return f"generations written: {artifacts.GENERATIONS_MD.path(s.workdir)}"
    return single("tools/generate_samples.py", *(a for n, f in folders.items() for a in ("--model", f"{n}={f}")),
                  "--output", out.parent)


def lm_eval(r: Layout, method: str) -> Command:
    s = r.s
    return single("tools/lm_eval_hf.py", "--model", r.hf(method), "--tasks", s.lm_eval_tasks,
                  "--output", s.workdir / "report" / f"lm_eval_{method}.json", *s.lm_eval_flags)

"""The recipe's comparison: English perplexity (forgetting) and Korean perplexity (learning) of
every method against the base, from the training entry's metrics JSONL files, with bits per byte
beside every perplexity and benchmark accuracy before and after.

Each run's last `eval/<name>` records are its final numbers; the baseline is a run of the base
model's own evaluation (the tiny base's pre-training, or a run's iteration-0 evaluation of a converted base),
on the same held-out sets, sequence length, batch and --eval-iters. Outputs are written
atomically: results.json (every number), report.md (the tables) and a PNG plot.

Bits per byte (tools/text_bytes.py's JSON: each set's tokens and the UTF-8 bytes its documents
decode to) is the evaluation's mean loss per token in bits times the set's tokens per byte:
    bpb = lm_loss / ln 2 * tokens / bytes
Unlike perplexity it compares across tokenizers and languages (a byte-level tokenizer spends ~3
tokens on a Hangul syllable). The tokens-per-byte ratio is the whole set's; an evaluation of
--eval-iters batches scores windows drawn from the set, so its bpb is exact where they cover the
set and otherwise an estimate whose error is the windows' ratio against the set's.

Benchmark accuracy (tools/eval_benchmarks.py's JSON per model, the same seeded documents for
each) is reported as acc_norm where lm-evaluation-harness reports it, else acc, with its standard
error, and each method's change against the base as a paired difference over the same documents
(mean of after - before per document, with the standard error of that mean).

Standard library (and matplotlib for the plot) only: it reads what the evaluation steps wrote.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from megatron_scale import artifacts
from megatron_scale import method_catalog as catalog
from megatron_scale.durable import atomic_write, save_figure
from megatron_scale.reports.benchmarks import section
from megatron_scale.reports.route_sweep import route_section
from megatron_scale.run_metrics import evaluations


@dataclass(kw_only=True)
class Row:
    """One method's final evaluation next to the base's."""

    method: str
    """--method of the run."""
    iteration: int
    """Iteration of its last evaluation."""
    ppl: dict[str, float]
    """Perplexity per evaluation set (en, ko, ...)."""
    preserve_fraction: dict[str, float]
    """SCALE-Route: share of tokens the router sent to the preservation head, per set."""
    bpb: dict[str, float] = field(default_factory=dict)
    """Bits per UTF-8 byte per evaluation set whose bytes are known (empty without them)."""


def last_eval(metrics: str | os.PathLike, iteration: int | None = None) -> tuple[int, dict[str, dict]]:
    """The last iteration's (or `iteration`'s) `eval/<name>` records of a metrics JSONL file."""
    evals = evaluations(metrics)
    if iteration is not None and iteration not in evals:
        raise ValueError(f"{metrics}: no evaluation at iteration {iteration} (evaluated at {sorted(evals)})")
    it = max(evals) if iteration is None else iteration
    return it, evals[it]


def curve(metrics: str | os.PathLike, name: str, sizes: dict[str, dict] | None = None) -> list[tuple[int, float]]:
    """(iteration, perplexity) of one evaluation set over a run, in iteration order; with `sizes`
    (text_bytes' sets), (iteration, bits per byte)."""
    return [(it, bits_per_byte(recs[name], sizes[name]) if sizes else float(recs[name]["ppl"]))
            for it, recs in sorted(evaluations(metrics).items()) if name in recs]


def bits_per_byte(record: dict, size: dict) -> float:
    """An evaluation record's mean loss per token (nats) in bits per byte of its set."""
    return float(record["lm_loss"]) / math.log(2) * int(size["tokens"]) / int(size["bytes"])


def text_sizes(path: str | os.PathLike) -> dict[str, dict]:
    """tools/text_bytes.py's sets: {name: {prefix, documents, tokens, bytes, chars}}."""
    p = Path(path)
    try:
        sets = json.loads(p.read_text())["sets"]
        for name, size in sets.items():
            if int(size["tokens"]) <= 0 or int(size["bytes"]) <= 0:
                raise ValueError(f"set {name} has {size['tokens']} tokens and {size['bytes']} bytes")
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"--text-bytes {p}: not tools/text_bytes.py's output ({type(e).__name__}: {e})") from e
    return sets


def row(method: str, metrics: str | os.PathLike, iteration: int | None = None,
        sizes: dict[str, dict] | None = None) -> Row:
    it, recs = last_eval(metrics, iteration)
    return Row(method=method, iteration=it, ppl={k: float(r["ppl"]) for k, r in recs.items()},
               preserve_fraction={k: float(r["preserve_fraction"]) for k, r in recs.items() if "preserve_fraction" in r},
               bpb={k: bits_per_byte(r, sizes[k]) for k, r in recs.items() if sizes and k in sizes})


def checks(base: Row, rows: list[Row], old: Sequence[str] = ("en",), new: str = "ko") -> dict[str, bool]:
    """The claims the recipe shows: new-language perplexity falls for every method, and
    SCALE-Preserve (method_catalog.PRESERVING) forgets less of each old-domain set than full
    fine-tuning (REFERENCE), when both ran."""
    out = {f"{new} perplexity falls for {r.method}": r.ppl[new] < base.ppl[new] for r in rows}
    by = {r.method: r for r in rows}
    keeps, ref = catalog.PRESERVING, catalog.REFERENCE
    if keeps in by and ref in by:
        for o in old:
            out[f"{keeps} forgets less {o} than {ref}"] = by[keeps].ppl[o] - base.ppl[o] < by[ref].ppl[o] - base.ppl[o]
    return out


def table(base: Row, rows: list[Row], old: Sequence[str] = ("en",), new: str | Sequence[str] = "ko") -> str:
    """One row per method: each old-domain set's perplexity, bits per byte (when known) and
    perplexity change (forgetting), each new set's (learning), and for Route the share of tokens
    routed to z_p (first old set / first new)."""
    bpb, news = bool(base.bpb), _sets(new)

    def cells(r: Row, name: str, kind: str) -> list[str]:
        out = [f"{r.ppl[name]:.2f}"] + ([f"{r.bpb[name]:.3f}"] if bpb else [])
        return out + ([_pct(r.ppl[name], base.ppl[name])] if r is not base else [""])

    def heads(name: str, kind: str) -> list[str]:
        return [f"{name} PPL ({kind})"] + ([f"{name} bpb"] if bpb else []) + [f"{name} change"]

    cols = [c for o in old for c in heads(o, "forgetting")] + [c for n in news for c in heads(n, "learning")]
    head = f"| method | {' | '.join(cols)} | routed to preservation head ({old[0]} / {news[0]}) |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for r in (base, *rows):
        route = (f"{r.preserve_fraction.get(old[0], math.nan):.3f} / {r.preserve_fraction.get(news[0], math.nan):.3f}"
                 if r.preserve_fraction and r is not base else "")
        label = f"base (iteration {base.iteration})" if r is base else catalog.label(r.method)
        values = [c for o in old for c in cells(r, o, "forgetting")] + [c for n in news for c in cells(r, n, "learning")]
        lines.append(f"| {label} | {' | '.join(values)} | {route} |")
    return "\n".join(lines) + "\n"


def _sets(new: str | Sequence[str]) -> tuple[str, ...]:
    """The new-domain sets, the main one first."""
    return (new,) if isinstance(new, str) else tuple(new)


def _pct(after: float, before: float) -> str:
    return f"{100.0 * (after / before - 1.0):+.1f}%"


def plot(base: Row, runs: dict[str, str], path: Path, sets: Sequence[str],
         sizes: dict[str, dict] | None = None, learning: Sequence[str] = ()) -> None:
    """Perplexity over iterations, one panel per evaluation set and one line per method, the
    base's as a dashed line (log scale: these perplexities span orders of magnitude); with
    `sizes`, a second row of the same curves in bits per byte (linear scale). The last set, and
    those in `learning`, are titled learning, the others forgetting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [("ppl", None)] + ([("bpb", sizes)] if sizes else [])
    fig, axes = plt.subplots(len(kinds), len(sets), figsize=(4.6 * len(sets), 3.8 * len(kinds)), squeeze=False)
    for row_axes, (kind, by) in zip(axes, kinds):
        for ax, name in zip(row_axes, sets):
            for method, metrics in runs.items():
                points = curve(metrics, name, by)
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                        label=catalog.label(method))
            ref = base.ppl[name] if kind == "ppl" else base.bpb[name]
            ax.axhline(ref, color="black", linestyle="--", linewidth=1,
                       label=f"base {ref:.1f}" if kind == "ppl" else f"base {ref:.3f}")
            ax.set_title(f"{name}: {'learning' if name == sets[-1] or name in learning else 'forgetting'} (lower is better)")
            ax.set_xlabel("iteration")
            if kind == "ppl":
                ax.set_ylabel("perplexity (log scale)")
                ax.set_yscale("log")
            else:
                ax.set_ylabel("bits per UTF-8 byte")
        row_axes[-1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_report(base_metrics: str, runs: dict[str, str], out_dir: str | os.PathLike,
                 old: Sequence[str] = ("en",), new: str | Sequence[str] = "ko", base_iteration: int | None = None,
                 route_sweep: str | os.PathLike | None = None, text_bytes: str | os.PathLike | None = None,
                 benchmarks: dict[str, str] | None = None, failed: dict[str, str] | None = None) -> dict:
    """Read every run, write results.json, report.md and perplexity.png (curves) under out_dir;
    return the results (with the table under "table"). `old`: the old-domain sets (forgetting),
    the first one the main one; `new`: the new-domain set (learning), or several, the first the
    main one (the checks and the SCALE-Route section use it). The base's numbers are `base_metrics`' last evaluation, or its
    evaluation at `base_iteration` (0: a run's before-training evaluation). `route_sweep` (a
    sweep.json of tools/route_sweep.py) adds the SCALE-Route section (reports/route_sweep.py) to
    report.md, and its numbers and markdown to results.json["route_sweep"]. `text_bytes`
    (tools/text_bytes.py's JSON) adds bits per byte beside every perplexity and to the curves;
    `benchmarks` ({"base": JSON, method: JSON} of tools/eval_benchmarks.py) the accuracy section
    (reports/benchmarks.py), its numbers under results.json["benchmarks"]. `failed`: methods that did
    not finish, each with why (results.json["failed"] and a section of report.md)."""
    old, news = tuple(old), _sets(new)
    new = news[0]
    out = Path(out_dir)
    sizes = text_sizes(text_bytes) if text_bytes is not None else None
    if sizes is not None and (missing := sorted({*old, *news} - set(sizes))):
        raise ValueError(f"--text-bytes {text_bytes}: no set(s) {missing}")
    base = row("base", base_metrics, base_iteration, sizes)
    rows = [row(m, p, None, sizes) for m, p in runs.items()]
    for r in [base, *rows]:
        missing = {*old, *news} - set(r.ppl)
        if missing:
            raise ValueError(f"run {r.method}: no evaluation set(s) {sorted(missing)} "
                             f"(--eval-data-path {' '.join(f'{n}=...' for n in (*old, *news))})")
    bench = section(benchmarks) if benchmarks else None
    out.mkdir(parents=True, exist_ok=True)
    text = table(base, rows, old, news)
    results = {"base": asdict(base), "runs": [asdict(r) for r in rows], "checks": checks(base, rows, old, new),
               "table": text}
    if route_sweep is not None:
        results["route_sweep"] = route_section(route_sweep, out, old[0], new)
        if catalog.router(list(runs)):
            text += ("\nSCALE-Route's row is its training-time evaluation, with the router it was upscaled with; "
                     "the router calibrated after training is in the SCALE-Route section below.\n")
        text += results["route_sweep"]["section"]
    if bench is not None:
        results["benchmarks"] = bench
        text += bench["section"]
    if failed:
        results["failed"] = dict(failed)
        text += "\n## Methods not in this report\n\n" + "".join(f"- **{m}**: {why}\n" for m, why in failed.items())
    atomic_write(out / artifacts.RESULTS.name, json.dumps(results, indent=2) + "\n")
    atomic_write(out / artifacts.REPORT.name, text)
    plot(base, runs, out / "perplexity.png", (*old, *news), sizes, news)
    return results

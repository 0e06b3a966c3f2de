"""The recipe's comparison: English perplexity (forgetting) and Korean perplexity (learning) of
every method against the base, from the training entry's metrics JSONL files.

Each run's last `eval/<name>` records are its final numbers; the baseline is a run of the base
model's own evaluation (the tiny base's pre-training, or a run's iteration-0 evaluation of a converted base),
on the same held-out sets, sequence length, batch and --eval-iters. Outputs are written
atomically: results.json (every number), report.md (the table) and a PNG plot.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from megatron_scale.recipe.route_report import route_section

LABELS = {
    "scale-preserve": "SCALE-Preserve", "scale-adapt": "SCALE-Adapt", "scale-route": "SCALE-Route",
    "full": "full fine-tuning", "freeze": "Freeze", "llama-pro": "LLaMA-Pro", "lora": "LoRA",
}


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


def evaluations(metrics: str | os.PathLike) -> dict[int, dict[str, dict]]:
    """Every `eval/<name>` record of a metrics JSONL file, by iteration then set name."""
    path = Path(metrics)
    if not path.is_file():
        raise FileNotFoundError(f"metrics file {path} does not exist (did the run finish?)")
    evals: dict[int, dict[str, dict]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e})") from e
        kind = rec.get("kind", "")
        if kind.startswith("eval/"):
            evals.setdefault(rec["iteration"], {})[kind[5:]] = rec
    if not evals:
        raise ValueError(f"{path}: no evaluation records (run with --eval-interval and --eval-data-path)")
    return evals


def last_eval(metrics: str | os.PathLike, iteration: int | None = None) -> tuple[int, dict[str, dict]]:
    """The last iteration's (or `iteration`'s) `eval/<name>` records of a metrics JSONL file."""
    evals = evaluations(metrics)
    if iteration is not None and iteration not in evals:
        raise ValueError(f"{metrics}: no evaluation at iteration {iteration} (evaluated at {sorted(evals)})")
    it = max(evals) if iteration is None else iteration
    return it, evals[it]


def curve(metrics: str | os.PathLike, name: str) -> list[tuple[int, float]]:
    """(iteration, perplexity) of one evaluation set over a run, in iteration order."""
    return [(it, float(recs[name]["ppl"])) for it, recs in sorted(evaluations(metrics).items()) if name in recs]


def row(method: str, metrics: str | os.PathLike, iteration: int | None = None) -> Row:
    it, recs = last_eval(metrics, iteration)
    return Row(method=method, iteration=it, ppl={k: float(r["ppl"]) for k, r in recs.items()},
               preserve_fraction={k: float(r["preserve_fraction"]) for k, r in recs.items() if "preserve_fraction" in r})


def checks(base: Row, rows: list[Row], old: Sequence[str] = ("en",), new: str = "ko") -> dict[str, bool]:
    """The claims the recipe shows: new-language perplexity falls for every method, and
    SCALE-Preserve forgets less of each old-domain set than full fine-tuning (when both ran)."""
    out = {f"{new} perplexity falls for {r.method}": r.ppl[new] < base.ppl[new] for r in rows}
    by = {r.method: r for r in rows}
    if "scale-preserve" in by and "full" in by:
        for o in old:
            out[f"scale-preserve forgets less {o} than full"] = (
                by["scale-preserve"].ppl[o] - base.ppl[o] < by["full"].ppl[o] - base.ppl[o])
    return out


def table(base: Row, rows: list[Row], old: Sequence[str] = ("en",), new: str = "ko") -> str:
    """One row per method: each old-domain set's perplexity and change (forgetting), the new
    set's (learning), and for Route the share of tokens routed to z_p (first old set / new)."""
    cols = [c for o in old for c in (f"{o} PPL (forgetting)", f"{o} change")]
    head = f"| method | {' | '.join(cols)} | {new} PPL (learning) | {new} change | routed to preservation head ({old[0]} / {new}) |"
    width = len(cols) + 4
    base_cells = [c for o in old for c in (f"{base.ppl[o]:.2f}", "")]
    lines = [head, "|" + "---|" * width,
             f"| base (iteration {base.iteration}) | {' | '.join(base_cells)} | {base.ppl[new]:.2f} | | |"]
    for r in rows:
        route = (f"{r.preserve_fraction.get(old[0], math.nan):.3f} / {r.preserve_fraction.get(new, math.nan):.3f}"
                 if r.preserve_fraction else "")
        cells = [c for o in old for c in (f"{r.ppl[o]:.2f}", _pct(r.ppl[o], base.ppl[o]))]
        lines.append(f"| {LABELS.get(r.method, r.method)} | {' | '.join(cells)} "
                     f"| {r.ppl[new]:.2f} | {_pct(r.ppl[new], base.ppl[new])} | {route} |")
    return "\n".join(lines) + "\n"


def _pct(after: float, before: float) -> str:
    return f"{100.0 * (after / before - 1.0):+.1f}%"


def plot(base: Row, runs: dict[str, str], path: Path, sets: Sequence[str]) -> None:
    """Perplexity over iterations, one panel per evaluation set and one line per method, the
    base's as a dashed line (log scale: these perplexities span orders of magnitude)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(4.6 * len(sets), 3.8), squeeze=False)
    for ax, name in zip(axes[0], sets):
        for method, metrics in runs.items():
            points = curve(metrics, name)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                    label=LABELS.get(method, method))
        ax.axhline(base.ppl[name], color="black", linestyle="--", linewidth=1, label=f"base {base.ppl[name]:.1f}")
        ax.set_title(f"{name}: {'learning' if name == sets[-1] else 'forgetting'} (lower is better)")
        ax.set_xlabel("iteration")
        ax.set_ylabel("perplexity (log scale)")
        ax.set_yscale("log")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    _atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def _atomic(path: Path, write) -> None:  # type: ignore[no-untyped-def]
    tmp = path.with_name(path.name + ".partial")
    write(tmp)
    os.replace(tmp, path)


def write_report(base_metrics: str, runs: dict[str, str], out_dir: str | os.PathLike,
                 old: Sequence[str] = ("en",), new: str = "ko", base_iteration: int | None = None,
                 route_sweep: str | os.PathLike | None = None, failed: dict[str, str] | None = None) -> dict:
    """Read every run, write results.json, report.md and perplexity.png (curves) under out_dir;
    return the results (with the table under "table"). `old`: the old-domain sets (forgetting),
    the first one the main one. The base's numbers are `base_metrics`' last evaluation, or its
    evaluation at `base_iteration` (0: a run's before-training evaluation). `route_sweep` (a
    sweep.json of tools/route_sweep.py) adds the SCALE-Route section (route_report.py) to
    report.md, and its numbers and markdown to results.json["route_sweep"]. `failed`: methods
    that did not finish, each with why (results.json["failed"] and a section of report.md)."""
    old = tuple(old)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = row("base", base_metrics, base_iteration)
    rows = [row(m, p) for m, p in runs.items()]
    for r in [base, *rows]:
        missing = {*old, new} - set(r.ppl)
        if missing:
            raise ValueError(f"run {r.method}: no evaluation set(s) {sorted(missing)} "
                             f"(--eval-data-path {' '.join(f'{n}=...' for n in (*old, new))})")
    text = table(base, rows, old, new)
    results = {"base": asdict(base), "runs": [asdict(r) for r in rows], "checks": checks(base, rows, old, new),
               "table": text}
    if route_sweep is not None:
        results["route_sweep"] = route_section(route_sweep, out, old[0], new)
        text += results["route_sweep"]["section"]
    if failed:
        results["failed"] = dict(failed)
        text += "\n## Methods not in this report\n\n" + "".join(f"- **{m}**: {why}\n" for m, why in failed.items())
    _atomic(out / "results.json", lambda tmp: tmp.write_text(json.dumps(results, indent=2) + "\n"))
    _atomic(out / "report.md", lambda tmp: tmp.write_text(text))
    plot(base, runs, out / "perplexity.png", (*old, new))
    return results

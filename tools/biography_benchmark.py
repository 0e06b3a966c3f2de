"""The synthetic biography benchmark (SCALE's controlled forgetting experiment) on this
project's training recipe.

    python tools/biography_benchmark.py --preset cpu --out runs/biography
    python tools/biography_benchmark.py --preset gpu --out runs/biography_gpu
    python tools/biography_benchmark.py --preset cpu --methods full scale-route --task1-iters 100
    python tools/biography_benchmark.py --preset cpu --out runs/bio_frontier --task1-iters 800 \
        --task1-lrs 3e-4 1e-3 3e-3 --seeds 1234 1235 1236      # the frontier (docs/biography.md)
    python tools/biography_benchmark.py --preset cpu --out runs/bio_frontier --methods full --task1-lrs 1e-4 \
        --task1-iters 3000 --task1-stop-at 0.95 --eval-dense-until 200 --eval-dense-interval 5 \
        --routed-baselines --seeds 1234 1235 1236     # more runs into the same frontier (results/...-v2)

Pre-trains a small Llama-style model on biographies of synthetic people, fine-tunes it on QA
for a subset of them (task 0), then per method trains QA on people it has never seen (task 1),
measuring first-token accuracy on both tasks over the steps. Writes OUT/results.json (every
number), OUT/table.md (also printed) and OUT/plot.png. Runs as one process (world size 1).

With --task1-lrs every method runs at each LR; with --seeds the whole protocol runs once per seed
under OUT/seed<N>/; either way OUT/frontier.{md,json,png} compares the methods at equal task-1
learning (megatron_scale/reports/bio_frontier.py). Every stage a call finishes is kept (OUT/.../stages/*.json): calling
again with the same flags runs only what is missing, so a long frontier survives being stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from megatron_scale.bio.protocol import StageMismatch, run_protocol
from megatron_scale.bio.settings import Settings, add_settings_flags, settings_from
from megatron_scale.reports.bio_frontier import runs_of, runs_of_stages, write_frontier
from megatron_scale.reports.bio_frontier import title as frontier_title
from megatron_scale.reports.bio import expansion_table, router_table, table, write_all

PRESETS = {
    # Measured on 2 CPU cores: see results/2026-11-23-biography-cpu/.
    "cpu": Settings(),
    # The paper's scale: 200K people, 100K pre-trained, 50K task 0, 20K task 1 (one GPU).
    "gpu": Settings(
        pretrain_people=100_000, task0_people=50_000, task1_people=20_000, bios_per_person=5,
        vocab_size=8192, num_layers=12, hidden_size=768, num_attention_heads=12, num_query_groups=12,
        ffn_hidden_size=2048, seq_length=256, micro_batch_size=128, global_batch_size=128,
        pretrain_iters=40_000, pretrain_lr=1e-3, task0_iters=3_000, task0_lr=3e-4,
        task1_iters=5_000, task1_lr=3e-4, eval_interval=100, eval_people=1000, device="cuda",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The tool's own flags, then the experiment's (Settings' fields) and the methods' (the training
    entry's: --freeze-layers, --lora-rank, --scale-*; SCALE's router and gate also as --router-*,
    --gate-*): bio/settings.py add_settings_flags."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--out", required=True, help="output folder (data, checkpoints, results.json, table.md, plot.png)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="the frontier: run the whole protocol once per seed, under OUT/seed<N>/")
    p.add_argument("--from-stages", action="store_true",
                   help="run nothing: the frontier of the task-1 stages finished so far under OUT (a run in progress)")
    add_settings_flags(p)
    return p


def run_one(settings: Settings, out: str, preset: str, command: str) -> dict:
    start = time.monotonic()
    results = run_protocol(settings, out, progress=lambda m: print(m, flush=True))
    results["preset"], results["command"] = preset, command
    paths = write_all(results, out)
    print(table(results))
    print(router_table(results))
    print(expansion_table(results))
    print(f"wrote {', '.join(paths.values())} in {time.monotonic() - start:.0f}s")
    return results


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    if ns.seeds is not None and ns.seed is not None:
        raise SystemExit("error: --seed and --seeds: give one of them")
    if ns.seeds is not None and len(set(ns.seeds)) != len(ns.seeds):
        raise SystemExit(f"error: --seeds must be distinct; got {ns.seeds}")
    settings = settings_from(ns, PRESETS[ns.preset])
    try:
        settings.check()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    command = " ".join(["python", "tools/biography_benchmark.py", *(argv if argv is not None else sys.argv[1:])])
    if ns.from_stages:
        runs, stage_settings, markers, info = runs_of_stages(ns.out)
        if not runs:
            raise SystemExit(f"error: --from-stages: no finished task-1 stage under {ns.out}/seed*/stages/")
        paths = write_frontier(runs, ns.out, frontier_title(stage_settings, runs), markers=markers, info=info)
    else:
        try:
            all_results = run_all(ns, settings, command)
        except StageMismatch as e:
            raise SystemExit(f"error: {e}") from None
        if ns.seeds is None and ns.task1_lrs is None:
            return 0
        runs, markers, info = [], [], {}
        for results in all_results:
            got, ms, inf = runs_of(results)
            runs, markers = runs + got, markers + ms
            for name, d in inf.items():
                entry = info.setdefault(name, {k: v for k, v in d.items() if k != "direction_by_run"})
                entry.setdefault("direction_by_run", {}).update(d.get("direction_by_run", {}))
        paths = write_frontier(runs, ns.out, frontier_title(all_results[0]["settings"], runs), markers=markers,
                               info=info)
    with open(paths["md"], encoding="utf-8") as f:
        print(f.read())
    print(f"wrote {', '.join(paths.values())}")
    return 0


def run_all(ns: argparse.Namespace, settings: Settings, command: str) -> list[dict]:
    """The protocol once, or once per --seeds under OUT/seed<N>/ (finished seeds read)."""
    if ns.seeds is None:
        all_results = [run_one(settings, ns.out, ns.preset, command)]
    else:
        all_results = [run_one(dataclasses.replace(settings, seed=seed), os.path.join(ns.out, f"seed{seed}"), ns.preset,
                               command) for seed in ns.seeds]
    return all_results


if __name__ == "__main__":
    sys.exit(main())

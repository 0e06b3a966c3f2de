#!/usr/bin/env python3
"""What durability costs a checkpoint save (checkpoint/io.py save_checkpoint): a plain GPT model
saved --repeats times each way into --dir, one rank on CPU, the median and the range:

    not durable   the save with artifacts' fsyncs turned into no-ops (the save before issue 48:
                  megatron-core's writer fsyncs each shard file and `.metadata` itself; then the
                  rename, whose folder entries the page cache flushes when it likes)
    durable       the save as it is: every file and folder of iter_N.partial fsynced, the rename,
                  the parent folder fsynced

    python tools/bench_durable_save.py --dir runs/bench_save --layers 8 --hidden 512 --repeats 5

The two ways alternate (durable first in odd repeats) so a drift of the machine's load hits both.
Prints a Markdown table; docs/reliability.md has the measured one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True, help="where the checkpoints go (removed after each save)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29763")
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")

    from megatron_scale import durable
    from megatron_scale.checkpoint import io
    from megatron_scale.distributed import init_distributed
    from megatron_scale.methods.full import Full
    from megatron_scale.model.build import build_model
    from megatron_scale.model.args import LlamaArgs

    init_distributed(1, 1, device="cpu", seed=1234)
    h = a.hidden
    args = LlamaArgs(num_layers=a.layers, hidden_size=h, num_attention_heads=h // 64, num_query_groups=h // 64,
                     ffn_hidden_size=4 * h, kv_channels=64, vocab_size=32000, max_position_embeddings=512)
    model = build_model(args, Full())
    params = sum(t.numel() for t in model.parameters())
    real = (io.fsync_tree, io.durable_replace)

    def quick_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, synced: bool = False) -> None:
        os.replace(src, dst)

    times: dict[str, list[float]] = {"not durable": [], "durable": []}
    a.dir.mkdir(parents=True, exist_ok=True)
    io.save_checkpoint(model, a.dir / "warm-up", method=Full())  # megatron-core plans and caches its first save
    shutil.rmtree(a.dir / "warm-up")
    size = 0
    for i in range(a.repeats):
        for way in (("durable", "not durable") if i % 2 == 0 else ("not durable", "durable")):
            io.fsync_tree, io.durable_replace = real if way == "durable" else (lambda *_a, **_k: None, quick_replace)
            target = a.dir / f"iter_{i:07d}"
            t0 = time.perf_counter()
            io.save_checkpoint(model, target, method=Full())
            times[way].append(time.perf_counter() - t0)
            size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
            shutil.rmtree(target)
    io.fsync_tree, io.durable_replace = real
    print(f"plain GPT, {a.layers} layers, hidden {h}: {params / 1e6:.1f} M parameters, checkpoint {size / 2**20:.0f} MiB"
          f" (model only, fp32), {a.repeats} saves each way, one rank, in {a.dir}")
    print("\n| save | median | min | max |\n|---|---|---|---|")
    for way, t in times.items():
        print(f"| {way} | {statistics.median(t):.3f} s | {min(t):.3f} s | {max(t):.3f} s |")
    extra = statistics.median(times["durable"]) - statistics.median(times["not durable"])
    print(f"\ndurability adds {extra:+.3f} s to the median save ({durable.__name__}.durable_replace, fsync_tree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

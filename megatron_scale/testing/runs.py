"""Tiny datasets and torchrun invocations of the real training entry (the tests' end-to-end runs
and the kill harness, kills.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

VOCAB = 96
ARCH = ("--num-layers 4 --hidden-size 64 --num-attention-heads 16 --num-query-groups 8 --ffn-hidden-size 128 "
        "--vocab-size 96").split()
RUN = ("--seq-length 16 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 2 --device cpu "
       "--log-interval 1").split()
MODEL = (*ARCH, *RUN)


def make_dataset(prefix: Path, seed: int, docs: int = 200) -> str:
    """Learnable token streams (arithmetic sequences mod VOCAB) as a Megatron indexed dataset."""
    from megatron_scale import _mcore as mc

    g = np.random.default_rng(seed)
    builder = mc.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
    for _ in range(docs):
        n, start, step = int(g.integers(20, 60)), int(g.integers(0, VOCAB)), int(g.integers(1, 4))
        builder.add_document(torch.tensor([(start + step * i) % VOCAB for i in range(n)], dtype=torch.int32), [n])
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def random_dataset(prefix: Path, vocab: int, tokens: int, seed: int = 0, doc_tokens: int = 8193) -> str:
    """`tokens` uniform random token ids in documents of `doc_tokens` as a Megatron indexed dataset
    (the dtype megatron-core picks for `vocab`): input for timing runs, where what is learnt does not
    matter (tools/make_random_dataset.py; tools/gpu_run.sh perf2)."""
    from megatron_scale import _mcore as mc

    if vocab < 2 or tokens < 2 or doc_tokens < 2:
        raise ValueError(f"random_dataset: vocab {vocab}, tokens {tokens}, doc_tokens {doc_tokens} must be >= 2")
    dtype = mc.optimal_index_dtype(vocab)
    g = np.random.default_rng(seed)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    builder = mc.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for start in range(0, tokens, doc_tokens):
        n = min(doc_tokens, tokens - start)
        builder.add_document(torch.from_numpy(g.integers(0, vocab, n).astype(dtype)), [n])
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def command(nproc: int, *args: str) -> list[str]:
    """The entry's command line: with --load, only the run's flags (the checkpoint records the
    architecture); without, the tiny model's too."""
    model = RUN if "--load" in args else MODEL
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "megatron_scale.train", *model, *args]


def train(nproc: int, metrics: Path, *args: str, timeout: int = 300) -> list[dict]:
    """Run the entry to completion; return its JSONL training records."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(command(nproc, "--metrics-file", str(metrics), *args), capture_output=True,
                         text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return records(metrics)


def records(metrics: Path, kind: str = "train") -> list[dict]:
    if not metrics.exists():
        return []
    return [r for r in map(json.loads, metrics.read_text().splitlines()) if r["kind"] == kind]


def losses(recs: list[dict]) -> dict[int, float]:
    return {r["iteration"]: r["lm_loss"] for r in recs}

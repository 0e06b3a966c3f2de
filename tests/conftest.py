"""Shared test settings. Distributed tests spawn their own ranks (tests/_dist.py); GPU tests are
marked `gpu` through `requires_gpus(n)` and Transformer Engine tests `te` through `requires_te`,
each skipping with its reason where the device or TE is absent."""

from __future__ import annotations

import pytest
import torch

from megatron_scale.model.layers.te import te_available, te_reason


def requires_gpus(n: int = 1):  # noqa: ANN201 (a decorator)
    """Mark a test as needing `n` CUDA devices: the `gpu` marker plus a skip that says why."""
    have = torch.cuda.device_count()
    skip = pytest.mark.skipif(have < n, reason=f"needs {n} CUDA device(s), found {have}")

    def mark(fn):  # noqa: ANN001, ANN202
        return pytest.mark.gpu(skip(fn))

    return mark


def requires_te(fn):  # noqa: ANN001, ANN201 (a decorator)
    """Mark a test as needing NVIDIA Transformer Engine: the `te` marker plus a skip that says why."""
    skip = pytest.mark.skipif(not te_available(), reason=f"needs NVIDIA Transformer Engine: {te_reason()}")
    return pytest.mark.te(skip(fn))


# The slowest files first (the suite's --durations on the 2-core machine, 2026-11-27: the kill trials
# 386 s, the Slurm array 274 s of set-up, the Slurm pipeline, the SmolLM2 demo tests). With
# `--dist loadfile` (tests/run.sh) each file goes to the next free worker in collection order, so a
# long file collected last ran alone at the end while the other worker sat idle.
SLOW_FIRST = (
    "tests/training/test_kills.py",
    "tests/examples/test_scale_korean_array.py",
    "tests/examples/test_scale_korean_slurm.py",
    "tests/demo/test_smollm2.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """SLOW_FIRST's files first, in that order; every other file after them in collection order
    (a stable sort: each file's tests stay together and in their order)."""
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))

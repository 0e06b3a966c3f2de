"""Shared test settings. Distributed tests spawn their own ranks (tests/_dist.py); GPU tests are
marked `gpu` through `requires_gpus(n)` and Transformer Engine tests `te` through `requires_te`,
each skipping with its reason where the device or TE is absent."""

from __future__ import annotations

import os

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


# The slowest files first, longest first (per-file sums of the suite's --junitxml times on the 2-core
# machine, 2026-11-28, under load: the SmolLM2 demo 807 s, the training entry 686, the Slurm pipeline
# 464, the Slurm array 463, the biography benchmark 211, resharding 162, the GPU-run rehearsal 161,
# training from converted checkpoints 142, the SCALE export 141). With `--dist loadfile` (tests/run.sh)
# each file goes to the next free worker in collection order, so a long file collected last ran alone
# at the end while the other worker sat idle; longest-first leaves the short files to fill the gaps.
SLOW_FIRST = (
    "tests/demo/test_smollm2.py",
    "tests/training/test_train_entry.py",
    "tests/examples/test_scale_korean_slurm.py",
    "tests/examples/test_scale_korean_array.py",
    "tests/bio/test_biography.py",
    "tests/training/test_reshard.py",
    "tests/test_gpu_run.py",
    "tests/training/test_from_load.py",
    "tests/convert/test_scale_export.py",
    "tests/training/test_kills.py",
)


# The long tier: end-to-end runs whose claims were measured once and whose code changes rarely, kept
# out of CI's 25 minutes (the suite of 2026-12-02 took 53 min under load, 855 tests; these five took
# 1,939 s of its 6,305 worker-seconds). `SCALE_LONG_TESTS=1 bash tests/run.sh` runs them too
# (docs/install.md). Each is skipped with this reason, never silently.
LONG = (
    "tests/examples/test_scale_korean_array.py",  # the Slurm array over the tiny recipe: 617 s
    "tests/examples/test_scale_korean_slurm.py",  # the Slurm pipeline and its requeues: 622 s
    "tests/bio/test_biography.py::test_frontier_runs_every_method_at_every_lr_and_seed_and_summarises_them",  # 358 s
    "tests/test_gpu_run.py::test_local_rehearsed_its_two_attention_columns_and_sdpas_profile",  # 202 s
    "tests/test_gpu_run.py::test_te_rehearsed_end_to_end_a_failed_phase_recorded_and_the_rest_run",  # 140 s
)
LONG_REASON = "the long tier, outside CI's 25 minutes: SCALE_LONG_TESTS=1 runs it (tests/conftest.py LONG, docs/install.md)"


def _long(nodeid: str) -> bool:
    return any(nodeid == name or nodeid.startswith(name + ("::" if name.endswith(".py") else "[")) for name in LONG)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """SLOW_FIRST's files first, in that order; every other file after them in collection order
    (a stable sort: each file's tests stay together and in their order). LONG's tests are marked
    `long` and skipped with LONG_REASON unless SCALE_LONG_TESTS=1."""
    run_long = os.environ.get("SCALE_LONG_TESTS") == "1"
    for item in items:
        if _long(item.nodeid):
            item.add_marker(pytest.mark.long)
            if not run_long:
                item.add_marker(pytest.mark.skip(reason=LONG_REASON))
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))

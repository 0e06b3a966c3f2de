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

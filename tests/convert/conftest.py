"""Conversion tests run tiny models: one intra-op thread per process. With the default (one per
core) the spawned ranks and the test process spin against each other on a small machine and a
64x64 matmul takes milliseconds instead of microseconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

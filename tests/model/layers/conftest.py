"""The dense-reference harness's one spawn (_dense_reference.py results, cached per test process),
shared by test_linear.py, test_norm.py, test_heads.py and test_partition.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.model.layers import _dense_reference


@pytest.fixture(scope="module")
def dense_results() -> dict[str, Any]:
    return _dense_reference.results()

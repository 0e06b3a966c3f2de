"""model/layers/partition.py: each TP rank's blocks of an upscaled linear, norm and head map to
the global tensors under the checkpoint keys (weight, weight_21, weight_22, weight_12; weight_up):
the dense reference is built from the global state dict alone, through a global <-> local map
written independently of partition.py (tests/model/layers/_dense_reference.py), and every rank sees the
same global keys at TP=1 and TP=2."""

from __future__ import annotations

from typing import Any

import pytest

from tests.model.layers import _dense_reference as dense

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return dense.results()


def test_global_blocks_are_the_checkpoint_keys(results: dict) -> None:
    assert results["ranks"] == 2
    for keys in results["keys"]:
        assert keys == dense.expected_keys()

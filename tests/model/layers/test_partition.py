"""model/layers/partition.py: each TP rank's blocks of an upscaled linear, norm and head map to
the global tensors under the checkpoint keys (weight, weight_21, weight_22, weight_12; weight_up):
the dense reference is built from the global state dict alone, through a global <-> local map
written independently of partition.py (tests/model/layers/_dense_reference.py), and every rank sees the
same global keys at TP=1 and TP=2."""

from __future__ import annotations

import pytest

from tests.model.layers import _dense_reference as dense

pytestmark = pytest.mark.dist


def test_global_blocks_are_the_checkpoint_keys(dense_results: dict) -> None:
    assert dense_results["ranks"] == 2
    for keys in dense_results["keys"]:
        assert keys == dense.expected_keys()

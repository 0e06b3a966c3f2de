"""model/layers/linear.py: ScaleColumnParallelLinear (as linear_qkv and linear_fc1) and
ScaleRowParallelLinear (as linear_proj and linear_fc2), each Preserve and Adapt, equal the dense
[[W, W12 or 0], [W21, W22]] linear forward and backward at TP=1 and TP=2, and leave the frozen
base without a gradient (the harness: tests/model/layers/_dense_reference.py, one spawn shared with
test_norm.py, test_heads.py and test_partition.py)."""

from __future__ import annotations

import pytest

from tests.model.layers import _dense_reference as dense

pytestmark = pytest.mark.dist


def test_every_linear_case_was_checked(dense_results: dict) -> None:
    got, want = dense.checked(dense_results, dense.is_linear)
    assert got == want


@pytest.mark.parametrize("tp", dense.TPS)
def test_forward_and_input_gradient_equal_dense_reference(dense_results: dict, tp: int) -> None:
    errs = dense.errors(dense_results, dense.is_linear, tp, ("out", "grad_in"))
    assert len(errs) == 2 * 2 * len(dense.LINEARS)  # out and grad_in, Preserve and Adapt
    assert {k: v for k, v in errs.items() if not v <= dense.ATOL} == {}


@pytest.mark.parametrize("tp", dense.TPS)
def test_trainable_gradients_equal_dense_gradient_blocks(dense_results: dict, tp: int) -> None:
    quantities = ("grad_W21", "grad_W22", "grad_W12")
    errs = dense.errors(dense_results, dense.is_linear, tp, quantities)
    assert {k[2] for k in errs} == set(quantities)
    assert {k: v for k, v in errs.items() if not v <= dense.ATOL} == {}


@pytest.mark.parametrize("tp", dense.TPS)
def test_frozen_base_gets_no_gradient(dense_results: dict, tp: int) -> None:
    errs = dense.errors(dense_results, dense.is_linear, tp, ("frozen_no_grad",))
    assert len(errs) == 2 * len(dense.LINEARS)
    assert {k: v for k, v in errs.items() if v != 0.0} == {}

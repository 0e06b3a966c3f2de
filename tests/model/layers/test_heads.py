"""model/layers/heads.py: the [E | E_up] embedding equals nn.Linear(V, d+d') on one-hot ids, and
the output layer, untied and tied, equals z_a = [W_out W_out_up][h; h_up] (head adapt) and
z_p = [W_out 0][h; h_up] (head preserve, W_out_up without a gradient), forward and backward at
TP=1 and TP=2 (the harness: tests/model/layers/_dense_reference.py). The router and the head/router
settings of a built model: tests/model/layers/test_routing.py."""

from __future__ import annotations

import pytest

from tests.model.layers import _dense_reference as dense

pytestmark = pytest.mark.dist


def test_every_head_case_was_checked(dense_results: dict) -> None:
    got, want = dense.checked(dense_results, dense.is_head)
    assert got == want


@pytest.mark.parametrize("tp", dense.TPS)
def test_heads_equal_dense_reference(dense_results: dict, tp: int) -> None:
    errs = dense.errors(dense_results, dense.is_head, tp, ("out", "grad_in", "grad_E_up", "grad_W_out_up", "no_grad_W_out_up"))
    assert {k[2] for k in errs} == {"out", "grad_in", "grad_E_up", "grad_W_out_up", "no_grad_W_out_up"}
    assert {k: v for k, v in errs.items() if not v <= dense.ATOL} == {}


@pytest.mark.parametrize("tp", dense.TPS)
def test_frozen_tables_get_no_gradient(dense_results: dict, tp: int) -> None:
    errs = dense.errors(dense_results, dense.is_head, tp, ("frozen_no_grad",))
    assert len(errs) == 1 + 4  # the embedding; the output layer untied/tied x adapt/preserve
    assert {k: v for k, v in errs.items() if v != 0.0} == {}

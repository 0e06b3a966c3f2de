"""model/layers/norm.py: SplitRMSNorm equals the two RMS norms written out (base dims keep their
own statistic and frozen gain), forward and backward, at TP=1 and TP=2 (the harness:
tests/model/layers/_dense_reference.py)."""

from __future__ import annotations

import pytest

from tests.model.layers import _dense_reference as dense

pytestmark = pytest.mark.dist


def test_every_norm_case_was_checked(dense_results: dict) -> None:
    got, want = dense.checked(dense_results, dense.is_norm)
    assert got == want


@pytest.mark.parametrize("tp", dense.TPS)
def test_norm_equals_the_two_rms_norms(dense_results: dict, tp: int) -> None:
    errs = dense.errors(dense_results, dense.is_norm, tp, ("out", "grad_in", "grad_g_up"))
    assert {k[2] for k in errs} == {"out", "grad_in", "grad_g_up"}
    assert {k: v for k, v in errs.items() if not v <= dense.ATOL} == {}
    frozen = dense.errors(dense_results, dense.is_norm, tp, ("frozen_no_grad",))
    assert frozen and set(frozen.values()) == {0.0}

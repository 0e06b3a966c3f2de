"""The router's controls on hand-made logits and records: the global mixing weight alpha, random
per-token mixing (its expected metric against every mask it can draw), and the deployable
cross-fitted router."""

import itertools
import math

import pytest
import torch

from megatron_scale.route_eval.controls import alpha_sweep, alphas_in, crossfit, random_metric, random_sweep
from megatron_scale.route_stats.mixing import alpha_key, alpha_mix, mixing_records, random_mix
from megatron_scale.route_stats.token_records import token_records

Z_P = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
Z_A = torch.tensor([[0.0, 3.0, 0.0], [0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])
LABELS = torch.tensor([1, 2, 2])


def test_alpha_mixing_is_z_p_plus_alpha_times_the_new_columns_term():
    assert torch.equal(alpha_mix(Z_P, Z_A, 0.5), torch.tensor([[1.0, 1.5, 0.0], [0.0, 0.5, 1.0], [0.5, 0.0, 1.5]]))
    rec = mixing_records(Z_P, Z_A, LABELS, alphas=(0.0, 0.5, 1.0))
    # alpha 0 is z_p and 1 is z_a, token by token, as token_records scores the heads
    heads = token_records(Z_P, Z_A, LABELS)
    for alpha, head in ((0.0, "p"), (1.0, "a")):
        assert torch.equal(rec[alpha_key(alpha, "correct")], heads[f"correct_{head}"])
        assert torch.allclose(rec[alpha_key(alpha, "loss")], heads[f"loss_{head}"])
    # at 0.5 the labels (1, 2, 2) top rows 1 and 2 and row 3 (1.5 on token 2)
    assert rec[alpha_key(0.5, "correct")].tolist() == [True, True, True]
    mixed = torch.tensor([[1.0, 1.5, 0.0], [0.0, 0.5, 1.0], [0.5, 0.0, 1.5]])
    expected = torch.logsumexp(mixed, -1) - mixed[torch.arange(3), LABELS]
    assert torch.allclose(rec[alpha_key(0.5, "loss")], expected)
    assert alphas_in(rec) == [0.0, 0.5, 1.0]
    points = alpha_sweep({"old": rec, "new": rec}, metric="accuracy")
    assert [p["alpha"] for p in points] == [0.0, 0.5, 1.0]
    assert points[0]["old"] == pytest.approx(1 / 3) and points[1]["new"] == 1.0  # z_p gets only row 3 right
    with pytest.raises(KeyError, match="no alpha 0.25"):
        alpha_sweep({"old": rec}, [0.25])
    with pytest.raises(ValueError, match="differ in shape"):
        alpha_mix(Z_P, Z_A[:2], 0.5)


def test_random_mixing_takes_whole_rows_and_its_expectation_is_exact():
    g = torch.Generator().manual_seed(3)
    mixed, to_a = random_mix(Z_P, Z_A, 0.5, g)
    assert torch.equal(to_a, torch.rand(3, generator=torch.Generator().manual_seed(3)) < 0.5)
    for row in range(3):
        assert torch.equal(mixed[row], (Z_A if to_a[row] else Z_P)[row])
    assert not random_mix(Z_P, Z_A, 0.0)[1].any() and random_mix(Z_P, Z_A, 1.0)[1].all()
    rec = token_records(Z_P, Z_A, LABELS)
    f = 0.3
    for metric in ("accuracy", "ppl"):
        # the expectation over every mask the draw can give, each scored from the mixed logits
        mean = 0.0
        for mask in itertools.product((False, True), repeat=3):
            m = torch.tensor(mask)
            z = torch.where(m.unsqueeze(-1), Z_A, Z_P)
            r = token_records(z, z, LABELS)
            value = float(r["correct_p"].double().mean()) if metric == "accuracy" else float(r["loss_p"].double().mean())
            mean += math.prod(f if x else 1 - f for x in mask) * value
        got = random_metric(rec, f, metric)
        assert (got if metric == "accuracy" else math.log(got)) == pytest.approx(mean), metric
    points = random_sweep({"old": rec}, [0.0, 1.0])
    assert points[0]["old"] == pytest.approx(1 / 3) and points[1]["old"] == pytest.approx(2 / 3)
    assert points[0]["old_kept"] == 1.0 and points[1]["old_kept"] == 0.0
    with pytest.raises(ValueError, match="rate must lie"):
        random_metric(rec, 1.5, "accuracy")


def _records(stat: list[float], old: bool) -> dict[str, torch.Tensor]:
    n = len(stat)
    return {"stat/s": torch.tensor(stat), "correct_p": torch.full((n,), old), "correct_a": torch.full((n,), not old),
            "loss_p": torch.zeros(n), "loss_a": torch.zeros(n)}


def test_crossfit_routes_each_fold_by_a_tau_calibrated_on_the_others():
    folds = torch.tensor([0, 0, 1, 1])
    old, new = _records([0.9, 0.8, 0.95, 0.7], True), _records([0.1, 0.5, 0.2, 0.85], False)
    r = crossfit(("old", old), ("new", new), "s", "accuracy", keep_old=0.5, old_folds=folds, new_folds=folds)
    # fold 0 by fold 1's old (0.95, 0.7): tau 0.95 above; fold 1 by fold 0's (0.9, 0.8): tau 0.9
    assert [(f["fold"], f["tau"], f["direction"]) for f in r["folds"]] == [(0, pytest.approx(0.95), "above"),
                                                                         (1, pytest.approx(0.9), "above")]
    # kept on z_p: only 0.95 of fold 1; every new record goes to z_a
    assert r["old_kept"] == 0.25 and r["old"] == 0.25 and r["new_kept"] == 0.0 and r["new"] == 1.0
    # a fold's own records never move its tau
    changed = _records([0.1, 0.1, 0.95, 0.7], True)
    again = crossfit(("old", changed), ("new", new), "s", "accuracy", keep_old=0.5, old_folds=folds, new_folds=folds)
    assert again["folds"][0]["tau"] == r["folds"][0]["tau"]
    with pytest.raises(ValueError, match="two folds"):
        crossfit(("old", old), ("new", new), "s", "accuracy", keep_old=0.5, old_folds=torch.zeros(4, dtype=torch.long),
                 new_folds=torch.zeros(4, dtype=torch.long))

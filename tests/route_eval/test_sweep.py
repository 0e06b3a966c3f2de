"""SCALE-Route at every threshold from one pass (route_eval/, route_stats/token_records.py,
route_stats/statistics.py).

Spawned (gloo, 2 ranks), the same Route model (trained-looking output heads) at TP=1 and TP=2:
- every router statistic equals its single-device definition on the full logits (TP=1 and TP=2);
- a tau/statistic/direction override at evaluation gives exactly the routed logits of a model
  built with that tau, statistic and direction (below for two of the statistics);
- the sweep's perplexity and accuracy at grid taus (one pass) equal a direct routed evaluation at
  that tau (GPTModel's own loss on the routed logits, same tokens) to fp32 rounding, with tokens
  routed both ways, and TP=2's records equal TP=1's.
Unit: ROC/AUC on known scores, in both directions; calibration reaches its target where reachable
and says so where not; on statistics that separate the other way round (old-domain tokens lower)
it picks direction "below" and meets its target, and the sweep's points route that way; bad
targets are refused by flag name.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks

STATS = ("cosine", "centered-cosine", "max-prob", "certainty")


def _state(model: Any) -> dict[str, torch.Tensor]:
    from megatron_scale.model.weights.state import global_state_dict

    g = torch.Generator().manual_seed(4)
    out = {}
    for k, v in global_state_dict(model).items():
        if k.endswith("output_layer.weight_up"):
            v = v + 3.0 * torch.randn(v.shape, generator=g)
        elif k.endswith(("weight_21", "weight_22", "embedding.word_embeddings.weight_up")):
            v = v + 0.3 * torch.randn(v.shape, generator=g)
        out[k] = v
    return out


def _model(tp: int, state: dict | None, **scale: Any) -> tuple[Any, dict]:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.weights.state import load_global_state_dict

    m = _tiny.build_scale(_tiny.base_config(tp), ScaleConfig(variant="route", **scale), False,
                          _tiny.base_state_dict(tied=False))
    state = _state(m) if state is None else state
    load_global_state_dict(m, state)
    return m.eval(), state


def _reference_stats(z_p: torch.Tensor, z_a: torch.Tensor) -> dict[str, torch.Tensor]:
    """Single-device definitions on full logits, fp64."""
    p, a = z_p.double(), z_a.double()
    cos = torch.nn.functional.cosine_similarity
    prob = p.softmax(-1)
    entropy = -(prob * prob.log()).sum(-1)
    return {"cosine": cos(p, a, dim=-1), "centered-cosine": cos(p - p.mean(-1, keepdim=True), a - a.mean(-1, keepdim=True), dim=-1),
            "max-prob": prob.max(-1).values, "certainty": 1 - entropy / math.log(p.shape[-1])}


def _at_tp(tp: int, state: dict | None) -> dict[str, Any]:
    from megatron_scale.model.layers.heads import output_head, router_settings
    from megatron_scale.scale_options import RouterOverride
    from megatron_scale.route_eval import curves
    from megatron_scale.evaluation.capture import collect

    model, state = _model(tp, state)
    b = _tiny.batch(seed=8)
    args = (b["input_ids"], b["position_ids"], b["attention_mask"])
    batch = {"tokens": b["input_ids"], "labels": b["labels"], "position_ids": b["position_ids"],
             "attention_mask": b["attention_mask"]}
    res: dict[str, Any] = {"state": state}
    rec = collect(model, [batch], STATS)
    res["records"] = rec
    with torch.no_grad(), output_head(model, "preserve"):
        z_p = model(*args, runtime_gather_output=True)
    with torch.no_grad(), output_head(model, "adapt"):
        z_a = model(*args, runtime_gather_output=True)
    ref = _reference_stats(z_p, z_a)
    res["stat_err"] = {s: float((rec[f"stat/{s}"].double() - ref[s].flatten().cpu()).abs().max()) for s in STATS}
    res["sweep"] = {}
    for s in STATS:
        grid = curves.default_grid([rec[f"stat/{s}"]], points=9)
        checks = []
        for tau in grid:
            with torch.no_grad(), router_settings(model, RouterOverride(tau=tau, statistic=s)):
                loss = model(*args, labels=b["labels"])  # [b, s] per-token loss of the routed logits
                logits = model(*args, runtime_gather_output=True)
            direct_ppl = math.exp(float(loss.double().mean()))
            direct_acc = float((logits.argmax(-1) == b["labels"]).double().mean())
            kept = float((rec[f"stat/{s}"] >= tau).double().mean())
            checks.append({"tau": tau, "kept": kept, "direct_ppl": direct_ppl,
                           "sweep_ppl": curves.metric_at(rec, s, tau, "ppl"),
                           "direct_acc": direct_acc, "sweep_acc": curves.metric_at(rec, s, tau, "accuracy")})
        res["sweep"][s] = checks
    # a tau/statistic override at evaluation == a model built with them
    res["override_equal"], res["direction_ppl"] = {}, {}
    for s in STATS:
        tau = float(rec[f"stat/{s}"].median())
        direction = "below" if s in ("cosine", "max-prob") else "above"
        other, _ = _model(tp, state, router_tau=tau, router_statistic=s, router_direction=direction)
        with torch.no_grad():
            built = other(*args, runtime_gather_output=True)
            with router_settings(model, RouterOverride(tau=tau, statistic=s, direction=direction)):
                overridden = model(*args, runtime_gather_output=True)
                loss = model(*args, labels=b["labels"])
            default = model(*args, runtime_gather_output=True)
        # the one-pass sweep in that direction == the direct routed evaluation
        res["direction_ppl"][s] = (math.exp(float(loss.double().mean())), curves.metric_at(rec, s, tau, "ppl", direction))
        res["override_equal"][s] = bool(torch.equal(built, overridden))
        res["override_changes_something"] = not torch.equal(default, overridden) or s == "cosine"
    return res


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed

    init_distributed(1, 1, device="cpu")
    tp1 = _at_tp(1, None)
    mc.parallel_state.destroy_model_parallel()
    mc.parallel_state.initialize_model_parallel(2)
    tp2 = _at_tp(2, tp1.pop("state"))
    tp2.pop("state")
    rec_err = {k: float((tp1["records"][k].double() - tp2["records"][k].double()).abs().max()) for k in tp1["records"]}
    return {"tp1": tp1, "tp2": tp2, "record_err": rec_err}


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_ranks(_body, 2)


@pytest.mark.dist
def test_statistics_match_their_definitions(results: list) -> None:
    for r in results:
        for tp in ("tp1", "tp2"):
            for s, err in r[tp]["stat_err"].items():
                assert err < 1e-5, (tp, s, err)


@pytest.mark.dist
def test_override_equals_a_model_built_with_that_tau(results: list) -> None:
    for r in results:
        for tp in ("tp1", "tp2"):
            assert all(r[tp]["override_equal"].values()), (tp, r[tp]["override_equal"])
            for s, (direct, swept) in r[tp]["direction_ppl"].items():
                assert swept == pytest.approx(direct, rel=1e-6), (tp, s)
            assert r[tp]["override_changes_something"]


@pytest.mark.dist
def test_sweep_equals_direct_routed_evaluation(results: list) -> None:
    for r in results:
        for tp in ("tp1", "tp2"):
            for s, checks in r[tp]["sweep"].items():
                assert any(0.0 < c["kept"] < 1.0 for c in checks), (tp, s, "needs tokens routed each way")
                assert checks[0]["kept"] == 1.0 and checks[-1]["kept"] == 0.0, (tp, s)
                for c in checks:
                    assert c["sweep_ppl"] == pytest.approx(c["direct_ppl"], rel=1e-6), (tp, s, c)
                    assert c["sweep_acc"] == pytest.approx(c["direct_acc"], abs=1e-12), (tp, s, c)
        for k, err in r["record_err"].items():
            assert err < 1e-4, (k, err)


def test_roc_and_auc() -> None:
    from megatron_scale.route_eval.curves import roc

    perfect = roc(torch.tensor([0.9, 0.8, 0.7]), torch.tensor([0.1, 0.2]))
    assert perfect["auc"] == 1.0
    assert perfect["tpr"][-1] == 1.0 and perfect["fpr"][-1] == 1.0
    inverted = roc(torch.tensor([0.1]), torch.tensor([0.5, 0.6]))
    assert inverted["auc"] == 0.0
    ties = roc(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.4]))
    assert ties["auc"] == pytest.approx(0.75)  # (0.5 + 1) / 2 per old token
    below = roc(torch.tensor([0.1]), torch.tensor([0.5, 0.6]), "below")  # keep z_p where s <= tau
    assert below["auc"] == 1.0 and below["thresholds"][0] == pytest.approx(0.1)
    assert roc(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.4]), "below")["auc"] == pytest.approx(0.25)


def test_calibration_reaches_a_reachable_target_and_says_when_not() -> None:
    from megatron_scale.route_eval.calibrate import CalibrationError, calibrate

    old = torch.linspace(0.5, 1.0, 200)  # old tokens score high
    new = torch.linspace(0.0, 0.6, 100)
    c = calibrate(old, new, "max-prob", keep_old=0.95, min_new_adapt=0.5)
    assert c.reachable and c.old_kept >= 0.95 and c.new_adapted >= 0.5
    assert float((old >= c.tau + 1e-6).double().mean()) < 0.95  # the largest such tau
    assert "both targets reached" in c.message
    hard = calibrate(old, new, "cosine", keep_old=0.95, min_new_adapt=0.99)
    assert not hard.reachable and hard.old_kept >= 0.95 and hard.new_adapted < 0.99
    assert "unreachable" in hard.message
    with pytest.raises(CalibrationError, match="--keep-old"):
        calibrate(old, new, "cosine", keep_old=1.5)
    with pytest.raises(CalibrationError, match="--min-new-adapt"):
        calibrate(old, new, "cosine", keep_old=0.9, min_new_adapt=0.0)


def test_calibration_picks_the_reverse_direction_and_meets_its_target() -> None:
    """Issue 35: the cosine came out lower on English (old) than on Korean (new). Read the paper's
    way (z_p where s >= tau) no tau keeps 95% of the old tokens without keeping the new ones too;
    the calibration takes "below" (z_p where s <= tau), meets both targets and says so; the
    analysis' points, ROC and AUC follow that direction, and an imposed direction is obeyed."""
    from megatron_scale.route_eval.analysis import analyse
    from megatron_scale.route_eval.calibrate import CalibrationError, calibrate

    old = torch.linspace(0.0, 0.5, 200)  # old tokens score low
    new = torch.linspace(0.4, 1.0, 100)
    c = calibrate(old, new, "cosine", keep_old=0.95, min_new_adapt=0.5)
    assert c.direction == "below" and c.reachable
    assert c.old_kept >= 0.95 and c.new_adapted >= 0.5
    assert c.old_kept == float((old <= c.tau).double().mean()) and c.new_adapted == float((new > c.tau).double().mean())
    assert float((old <= c.tau - 1e-6).double().mean()) < 0.95  # the smallest such tau: most new tokens to z_a
    assert c.new_adapted_by_direction["above"] < 0.1 < 0.5 < c.new_adapted_by_direction["below"]
    assert "z_p where cosine <= tau (below, chosen over above" in c.message and "both targets reached" in c.message
    forced = calibrate(old, new, "cosine", keep_old=0.95, min_new_adapt=0.5, direction="above")
    assert forced.direction == "above" and not forced.reachable and forced.old_kept >= 0.95
    assert "unreachable" in forced.message and "imposed" in forced.message
    same = calibrate(torch.ones(10), torch.ones(10), "cosine", keep_old=0.9)
    assert same.direction == "above"  # a tie keeps the paper's direction
    with pytest.raises(CalibrationError, match="--direction: unknown router direction 'up'"):
        calibrate(old, new, "cosine", keep_old=0.9, direction="up")

    def records(stat: torch.Tensor, loss_p: float, loss_a: float) -> dict[str, torch.Tensor]:
        n = stat.numel()
        return {"stat/cosine": stat, "loss_p": torch.full((n,), loss_p), "loss_a": torch.full((n,), loss_a),
                "correct_p": torch.zeros(n), "correct_a": torch.zeros(n)}

    res = analyse(("en", records(old, 1.0, 2.0)), ("ko", records(new, 5.0, 3.0)), ("cosine",), "ppl",
                  keep_old=0.95, min_new_adapt=0.5)
    r = res["statistics"]["cosine"]
    assert r["direction"] == r["calibration"]["direction"] == "below"
    assert r["auc_by_direction"]["below"] == pytest.approx(1.0 - r["auc"]) and r["auc_by_direction"]["below"] > 0.9
    assert r["calibration"]["en_kept"] >= 0.95 and 1.0 - r["calibration"]["ko_kept"] >= 0.5
    ends = [(p["en_kept"], p["ko_kept"]) for p in (r["points"][0], r["points"][-1])]
    assert ends == [(0.0, 0.0), (1.0, 1.0)]  # below: the lowest tau keeps nothing on z_p, the highest all
    assert max(r["roc"]["tpr"][i] - r["roc"]["fpr"][i] for i in range(len(r["roc"]["tpr"]))) > 0.8
    uncalibrated = analyse(("en", records(old, 1.0, 2.0)), ("ko", records(new, 5.0, 3.0)), ("cosine",), "ppl")
    assert uncalibrated["statistics"]["cosine"]["direction"] == "below"  # AUC above < 0.5

"""Training through a gate (--scale-gate-*, model/layers/gate.py; issue 45).

- The gated output is z_p + sigmoid((tau - s(z_p)) / T) (z_a - z_p), s computed by hand from the
  whole vocabulary (max-prob; certainty with direction below), at TP=1 and TP=2.
- At its neutral setting (g = 1 exactly: tau = 2 with max-prob at T = 1e-3) the gated model's
  logits and every gradient are SCALE-Preserve's bit for bit.
- The gradient flows only through W_out_up and the expansion: the parameters with a gradient are
  Preserve's, and the gate changes their gradients (it is not a constant).
- End to end (torchrun, training, the record and the export): tests/training/test_variants_trained.py,
  one run with both of issue 45's variants.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests._dist import run_ranks

pytestmark = pytest.mark.dist

GATES = {"neutral": ("max-prob", 2.0, 1e-3, "above"), "max-prob": ("max-prob", 0.12, 0.03, "above"),
         "certainty": ("certainty", 0.3, 0.05, "below")}


def _full(t: torch.Tensor, world: int) -> torch.Tensor:
    """A vocab-parallel slice [..., V/tp] gathered to [..., V]."""
    if world == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(world)]
    torch.distributed.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=-1)


def _run(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_head, output_layers
    from megatron_scale.scale_config import ScaleConfig
    from tests import _tiny

    init_distributed(world, 1, device="cpu")
    state = _tiny.base_state_dict(tied=False)
    b = _tiny.batch()
    out: dict[str, Any] = {}
    for name, g in (("plain", None), *GATES.items()):
        gate = {} if g is None else dict(zip(("gate_statistic", "gate_tau", "gate_temperature", "gate_direction"), g))
        model = _tiny.build_scale(_tiny.base_config(world), ScaleConfig(init="normal", **gate), False, state)
        with torch.no_grad():  # a trained-looking W_out_up (the same global table at any TP)
            full = torch.randn(_tiny.VOCAB, output_layers(model)[0].weight_up.shape[1],
                               generator=torch.Generator().manual_seed(7)) * 0.5
            layer = output_layers(model)[0]
            layer.weight_up.copy_(full[layer.vocab_start_index : layer.vocab_end_index])
        logits = model(b["input_ids"], b["position_ids"], b["attention_mask"])
        logits.float().pow(2).mean().backward()
        with torch.no_grad(), output_head(model, "preserve"):
            z_p = model(b["input_ids"], b["position_ids"], b["attention_mask"])
        out[name] = {"logits": _full(logits.detach(), world), "z_p": _full(z_p, world),
                     "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                     "frozen": sorted(n for n, p in model.named_parameters() if not p.requires_grad)}
    return out


@pytest.fixture(scope="module")
def ranks() -> dict[int, list[dict]]:
    return {tp: run_ranks(_run, tp) for tp in (1, 2)}


def _by_hand(z_p: torch.Tensor, z_a: torch.Tensor, statistic: str, tau: float, temp: float, direction: str) -> torch.Tensor:
    p = torch.softmax(z_p.double(), dim=-1)
    if statistic == "max-prob":
        s = p.max(-1).values
    else:
        s = 1 + (p * p.log()).sum(-1) / math.log(z_p.shape[-1])
    g = torch.sigmoid(((tau - s) if direction == "above" else (s - tau)) / temp).unsqueeze(-1)
    return z_p.double() + g * (z_a.double() - z_p.double())


@pytest.mark.parametrize("tp", [1, 2])
def test_neutral_gate_is_preserve_bit_for_bit(ranks: dict, tp: int) -> None:
    for r in ranks[tp]:
        plain, neutral = r["plain"], r["neutral"]
        assert torch.equal(neutral["logits"], plain["logits"])
        assert sorted(neutral["grads"]) == sorted(plain["grads"])
        assert [n for n in plain["grads"] if not torch.equal(plain["grads"][n], neutral["grads"][n])] == []


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("name", ["max-prob", "certainty"])
def test_gated_logits_equal_the_formula(ranks: dict, tp: int, name: str) -> None:
    r = ranks[tp][0]
    z_p, z_a, got = r["plain"]["z_p"], r["plain"]["logits"], r[name]["logits"]
    want = _by_hand(z_p, z_a, *GATES[name])
    assert float((got.double() - want).abs().max()) < 1e-5
    # the gate is neither open nor shut everywhere: it weighs tokens differently
    g = ((got - z_p).double().norm(dim=-1) / (z_a - z_p).double().norm(dim=-1))
    assert float(g.min()) < 0.3 and float(g.max()) > 0.7, (float(g.min()), float(g.max()))
    if tp == 2:  # the vocab-parallel statistic is the whole vocabulary's
        assert float((got - ranks[1][0][name]["logits"]).abs().max()) < 1e-5


@pytest.mark.parametrize("tp", [1, 2])
def test_gradients_flow_only_through_the_expansion(ranks: dict, tp: int) -> None:
    for r in ranks[tp]:
        plain, gated = r["plain"], r["max-prob"]
        assert sorted(gated["grads"]) == sorted(plain["grads"]) and gated["frozen"] == plain["frozen"]
        assert any(k.endswith("output_layer.weight_up") for k in gated["grads"])
        assert not set(gated["grads"]) & set(gated["frozen"])  # the base gets none
        assert any(not torch.equal(plain["grads"][n], gated["grads"][n]) for n in plain["grads"])

"""SCALE-Route's token router.

Unit (no process group): per token, the routed logits are exactly z_p where cos(z_p, z_a) >= tau
and exactly z_a elsewhere, on tokens built with known cosines (1, parallel, orthogonal, opposite,
zero); tau = -1 keeps every token on z_p; tau = 1 keeps exactly the tokens whose z_a is a positive
multiple of z_p; no gradient flows through the choice.
Full model (gloo, 2 ranks): a Route model with trained-looking heads routes some tokens each way;
its routed logits equal the choice recomputed from its own z_p and z_a, and at TP=2 (vocab-parallel
partial sums all-reduced, logits never gathered for routing) they equal TP=1's, with the same share.
Per character and per word (router unit, tests/_unit_vocab.py: a hand-made byte-level vocabulary
and Korean string, the labels given with the forward): every token takes the decision of its
unit's first token, recomputed here from the bytes; every byte token of a Hangul syllable takes one
decision; TP=2 equals TP=1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from megatron_scale.model.layers.routing import route
from tests import _tiny, _unit_vocab
from tests._dist import run_ranks


def _tokens() -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    g = torch.Generator().manual_seed(0)
    p = torch.randn(6, 10, generator=g)
    q = torch.randn(10, generator=g)
    # orthogonal exactly, in any summation order: disjoint supports (a projection leaves a dot
    # of about 1e-8 whose sign depends on the CPU's reduction order, and tau = 0 reads the sign)
    half = torch.arange(10) < 5
    p[2] = torch.where(half, p[2], 0.0)
    ortho = torch.where(half, 0.0, q)
    z_a = torch.stack([p[0], 2.5 * p[1], ortho, -p[3], 0.3 * p[4] + torch.randn(10, generator=g), torch.zeros(10)])
    cos = [1.0, 1.0, 0.0, -1.0, float(torch.nn.functional.cosine_similarity(p[4], z_a[4], dim=0)), 0.0]
    return p, z_a, cos


@pytest.mark.parametrize("tau", [-1.0, -0.5, 0.0, 0.5, 0.99, 1.0, 1.01])
def test_routed_logits_are_exactly_one_head_per_token(tau: float) -> None:
    z_p, z_a, cos = _tokens()
    out, keep = route(z_p, z_a, tau)
    for t, c in enumerate(cos):
        expect_keep = c >= tau - 1e-6 if t not in (0, 1, 3) else c >= tau
        if t == 5:  # z_a = 0: cos undefined; the token keeps z_p (cos taken as 1)
            expect_keep = 1.0 >= tau
        assert bool(keep[t]) == expect_keep, (t, c, tau)
        assert torch.equal(out[t], z_p[t] if keep[t] else z_a[t])


def test_tau_edges() -> None:
    z_p, z_a, _ = _tokens()
    _, keep = route(z_p, z_a, -1.0)
    assert bool(keep.all())
    _, keep = route(z_p, z_a, 1.0)
    assert keep.tolist() == [True, True, False, False, False, True]


@pytest.mark.parametrize("tau", [-1.0, 0.0, 0.5, 1.0])
def test_direction_below_keeps_the_other_side(tau: float) -> None:
    """direction "below": z_p exactly where the statistic <= tau (ties kept on z_p both ways)."""
    from megatron_scale.route_stats.statistics import cosine

    z_p, z_a, _ = _tokens()
    stat = cosine(z_p, z_a)
    out, keep = route(z_p, z_a, tau, direction="below")
    assert keep.tolist() == (stat <= tau).tolist()
    _, above = route(z_p, z_a, tau)
    assert ((keep | above) == True).all() and ((keep & above) == (stat == tau)).all()  # noqa: E712
    for t in range(len(keep)):
        assert torch.equal(out[t], z_p[t] if keep[t] else z_a[t])
    with pytest.raises(ValueError, match="unknown router direction 'up'"):
        route(z_p, z_a, tau, direction="up")


def test_no_gradient_through_the_choice() -> None:
    z_p, z_a, _ = _tokens()
    z_p, z_a = z_p.clone().requires_grad_(True), z_a.clone().requires_grad_(True)
    out, keep = route(z_p, z_a, 0.5)
    out.sum().backward()
    assert torch.equal(z_p.grad, keep.unsqueeze(-1).float().expand_as(z_p))
    assert torch.equal(z_a.grad, (~keep).unsqueeze(-1).float().expand_as(z_a))


def _perturbed_state(tau_model: Any) -> dict[str, torch.Tensor]:
    from megatron_scale.model.weights.state import global_state_dict

    g = torch.Generator().manual_seed(4)
    state = global_state_dict(tau_model)
    return {
        k: v + 3.0 * torch.randn(v.shape, generator=g) if k.endswith("output_layer.weight_up") else
        (v + 0.3 * torch.randn(v.shape, generator=g) if k.endswith(("weight_21", "weight_22", "embedding.word_embeddings.weight_up")) else v)
        for k, v in state.items()
    }


def _route_at(tp: int, state: dict | None, tau: float | None) -> dict[str, Any]:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.weights.state import load_global_state_dict

    base = _tiny.base_state_dict(tied=False)
    model = _tiny.build_scale(_tiny.base_config(tp), ScaleConfig(variant="route"), False, base, parallel_output=False)
    if state is None:
        state = _perturbed_state(model)
    load_global_state_dict(model, state)
    model.eval()
    b = _tiny.batch(seed=8)
    args = (b["input_ids"], b["position_ids"], b["attention_mask"])
    head = model.output_layer
    with torch.no_grad():
        z_p, z_a, cos = _both_heads(model, args)
        if tau is None:  # split the tokens: midway between the two middle cosines of the TP=1 model
            c = cos.flatten().sort().values
            tau = float((c[len(c) // 2 - 1] + c[len(c) // 2]) / 2)
        head.router = dataclasses.replace(head.router, tau=tau)
        head.reset_route_counts()
        routed = model(*args)
    keep = cos >= tau
    expected = torch.where(keep.unsqueeze(-1), z_p, z_a)
    clear = (cos - tau).abs() > 1e-5  # fp32 (router) and fp64 (here) agree away from tau
    either = torch.all((routed == z_p) | (routed == z_a), dim=-1)
    return {"routed": routed, "share": head.preserve_fraction,
            "recomputed_equal": bool(torch.equal(routed[clear], expected[clear]) and either.all()),
            "share_recomputed": float(keep.double().mean()), "state": state, "tau": tau,
            "units": _units_at(model, b, tau)}


def _both_heads(model: Any, args: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """z_p, z_a and their cosine per position (fp64: the reference the router is held to)."""
    from megatron_scale.model.layers.heads import output_head

    with output_head(model, "preserve"):
        z_p = model(*args)
    with output_head(model, "adapt"):
        z_a = model(*args)
    return z_p, z_a, torch.nn.functional.cosine_similarity(z_p.double(), z_a.double(), dim=-1)


def _unit_firsts(table: list[bytes], labels: list[int], unit: str) -> list[int]:
    """The position of each label's unit's first token, from the bytes (the rule, restated)."""
    first: list[int] = []
    for t, i in enumerate(labels):
        piece, prev = table[i], table[labels[t - 1]] if t else b""
        joins = bool(t and piece and prev and (piece[0] & 0xC0 == 0x80 or (
            unit == "word" and (piece[0] not in b" \t\n" or prev[-1] in b" \t\n"))))
        first.append(first[-1] if joins else t)
    return first


def _units_at(model: Any, b: dict, tau: float) -> dict[str, Any]:
    """Route the Korean string (row 0) and a random row per character and per word."""
    from megatron_scale.model.layers.heads import router_settings, set_unit_codes
    from megatron_scale.scale_options import RouterOverride
    from megatron_scale.model.layers.route_units import piece_codes

    table = _unit_vocab.pieces(_tiny.VOCAB)
    korean = torch.tensor(_unit_vocab.encode(_unit_vocab.KOREAN, table), device=b["input_ids"].device)
    assert korean.numel() == _tiny.SEQ + 1
    full = torch.cat((b["input_ids"], b["labels"][:, -1:]), dim=1)
    full[0] = korean
    args, labels = (full[:, :-1], b["position_ids"], b["attention_mask"]), full[:, 1:]
    set_unit_codes(model, piece_codes(table, _tiny.VOCAB))
    out: dict[str, Any] = {}
    with torch.no_grad():
        z_p, z_a, cos = _both_heads(model, args)
        for unit in ("char", "word"):
            with router_settings(model, RouterOverride(tau=tau, unit=unit)):
                routed = model(*args, route_labels=labels)
            firsts = torch.tensor([_unit_firsts(table, row, unit) for row in labels.tolist()], device=cos.device)
            keep = (cos >= tau).gather(1, firsts)
            expected = torch.where(keep.unsqueeze(-1), z_p, z_a)
            clear = ((cos - tau).abs() > 1e-5).gather(1, firsts)
            kept = torch.all(routed == z_p, dim=-1)
            out[unit] = {"routed": routed, "equal": bool(torch.equal(routed[clear], expected[clear])),
                         "either": bool(torch.all(kept | torch.all(routed == z_a, dim=-1))),
                         "kept": kept, "firsts": firsts, "units": int(firsts[0].unique().numel())}
        with router_settings(model, RouterOverride(tau=tau)):
            out["token_kept"] = torch.all(model(*args) == z_p, dim=-1)
    set_unit_codes(model, None)
    return out


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed

    init_distributed(1, 1, device="cpu")
    tp1 = _route_at(1, None, None)
    mc.parallel_state.destroy_model_parallel()
    mc.parallel_state.initialize_model_parallel(2)
    tp2 = _route_at(2, tp1.pop("state"), tp1["tau"])
    tp2.pop("state")
    return {"tp1": tp1, "tp2": tp2, "max_diff": float((tp1["routed"] - tp2["routed"]).abs().max())}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_body, 2)


@pytest.mark.dist
def test_route_model_tp2_equals_tp1(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for tp in ("tp1", "tp2"):
            assert r[tp]["recomputed_equal"], tp
            assert r[tp]["share"] == pytest.approx(r[tp]["share_recomputed"])
        assert 0.0 < r["tp1"]["share"] < 1.0, "the test needs tokens routed each way"
        assert r["tp2"]["share"] == r["tp1"]["share"]
        assert r["max_diff"] < 1e-4


@pytest.mark.dist
def test_route_per_character_and_word(ranks: list[dict[str, Any]]) -> None:
    """One decision per unit, the unit's first token's; a syllable's byte tokens never split."""
    table = _unit_vocab.pieces(_tiny.VOCAB)
    ids = _unit_vocab.encode(_unit_vocab.KOREAN, table)
    labels = ids[1:]  # the Korean row's labels
    char_of_byte = [k for k, ch in enumerate(_unit_vocab.KOREAN) for _ in ch.encode("utf-8")]
    starts = [sum(len(table[i]) for i in ids[: t + 1]) for t in range(len(labels))]
    chars = [char_of_byte[s] for s in starts]  # the character each label begins in
    split = {chars[t] for t, i in enumerate(labels) if table[i][0] & 0xC0 == 0x80}
    assert len(split) >= 4  # syllables coded as several byte tokens
    for r in ranks:
        for tp in ("tp1", "tp2"):
            u = r[tp]["units"]
            for unit in ("char", "word"):
                assert u[unit]["equal"] and u[unit]["either"], (tp, unit)
            kept = u["char"]["kept"][0].tolist()
            for c in split:
                members = {kept[t] for t, k in enumerate(chars) if k == c}
                assert len(members) == 1, (tp, c)  # every byte token of the character: one decision
            # the units change the routing: some token is routed unlike its own statistic says
            assert not torch.equal(u["char"]["kept"], u["token_kept"])
            assert not torch.equal(u["word"]["kept"], u["char"]["kept"])
            assert u["word"]["units"] < u["char"]["units"] < len(labels)
        for unit in ("char", "word"):
            assert float((r["tp1"]["units"][unit]["routed"] - r["tp2"]["units"][unit]["routed"]).abs().max()) < 1e-4

"""SCALE's output heads and router for the exported model (imports torch only; copied into the
exported folder beside modeling_scale_llama.py).

    z_p = W_out x                      preservation head (the base model's logits when W12 = 0)
    z_a = z_p + g W_out_up x_up        adaptation head; g = 1 (the paper's) or, with
                                       config.scale_gate_statistic set, g = sigmoid((tau - s(z_p)) / T)
                                       per token from a statistic of z_p alone
    route: per token z_p where the router statistic of (z_p, z_a) >= tau (direction "above", the
           paper's cos(z_p, z_a)) or <= tau ("below"), else z_a; with config.scale_router_unit char /
           word all tokens of one UTF-8 character / whitespace word take the unit's first decision.

Every SCALE option the exported model reads is read here, once, by `output_head`, `router_settings`
and `gate_settings`, which also refuse a value they do not know, naming its config key; the
config checks them at load and forward() again per call (they are editable, and route_* override
them per call). megatron_scale/model/layers/route_units.py writes the per-token codes; the rules
below are a copy of its own.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

HEADS = ("auto", "adapt", "preserve", "route")
STATISTICS = ("cosine", "centered-cosine", "max-prob", "certainty")
GATE_STATISTICS = ("none", "max-prob", "certainty")
DIRECTIONS = ("above", "below")
UNITS = ("token", "char", "word")
# per-token codes (megatron_scale/model/layers/route_units.py writes them; the rules below are its own)
EMPTY, CONT, SPACE_START, SPACE_END, ALL_CONT, OWED_SHIFT = 1, 2, 4, 8, 16, 5


class Router(NamedTuple):
    """Where the route head keeps z_p: statistic >= tau (above) or <= tau (below), per unit."""

    tau: float
    statistic: str
    direction: str
    unit: str


class Gate(NamedTuple):
    """g = sigmoid((tau - s(z_p)) / temperature) (direction above) or sigmoid((s - tau) / T) (below)."""

    statistic: str
    tau: float
    temperature: float
    direction: str


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{key} {value!r}: choose one of {choices}")
    return value


def _finite(key: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{key} {value!r}: must be a finite number") from e
    if not math.isfinite(out):
        raise ValueError(f"{key} {value!r}: must be a finite number")
    return out


def output_head(config: Any) -> str:
    """The head forward() emits: config.scale_output_head, "auto" resolved (route for a Route
    model, else adapt)."""
    head = _choice("scale_output_head", config.scale_output_head, HEADS)
    if head == "auto":
        return "route" if config.scale_variant == "route" else "adapt"
    return head


def router_settings(config: Any, tau: float | None = None, statistic: str | None = None,
                    direction: str | None = None, unit: str | None = None) -> Router:
    """config.scale_router_*, each replaced by the per-call override where given."""
    return Router(
        _finite("scale_router_tau", config.scale_router_tau if tau is None else tau),
        _choice("scale_router_statistic", config.scale_router_statistic if statistic is None else statistic,
                STATISTICS),
        _choice("scale_router_direction", getattr(config, "scale_router_direction", "above")
                if direction is None else direction, DIRECTIONS),
        _choice("scale_router_unit", getattr(config, "scale_router_unit", "token") if unit is None else unit, UNITS),
    )


def gate_settings(config: Any) -> Gate | None:
    """config.scale_gate_*: the gate of W_out_up's term (None: no gate, the paper's z_a)."""
    stat = _choice("scale_gate_statistic", getattr(config, "scale_gate_statistic", "none"), GATE_STATISTICS)
    if stat == "none":
        return None
    temperature = _finite("scale_gate_temperature", config.scale_gate_temperature)
    if temperature <= 0:
        raise ValueError(f"scale_gate_temperature {temperature!r}: must be positive")
    return Gate(stat, _finite("scale_gate_tau", config.scale_gate_tau), temperature,
                _choice("scale_gate_direction", getattr(config, "scale_gate_direction", "above"), DIRECTIONS))


def check_settings(config: Any) -> None:
    """Refuse, naming the key, any head, router or gate setting the model would not know."""
    output_head(config)
    router_settings(config)
    gate_settings(config)
    text = getattr(config, "scale_router_unit_codes", None)
    if text:
        decode_codes(text, config.vocab_size)


class ScaleOutputLayer(nn.Module):
    """z_p = W_out x, z_a = z_p + g W_out_up x_up; weight [V, d] (absent when tied to E),
    weight_up [V, d']."""

    def __init__(self, vocab: int, d: int, du: int, tied: bool) -> None:
        super().__init__()
        self.d = d
        self.weight = None if tied else nn.Parameter(torch.empty(vocab, d))
        self.weight_up = nn.Parameter(torch.empty(vocab, du))

    def forward(self, x: torch.Tensor, base_weight: torch.Tensor, head: str, router: Router,
                gate: Gate | None = None, pool: Callable[[torch.Tensor], torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits, keep): keep [b, s] is where the route head emitted z_p (None for the others)."""
        z_p = F.linear(x[..., : self.d], base_weight)
        if head == "preserve":
            return z_p, None
        z_up = F.linear(x[..., self.d :], self.weight_up)
        if gate is not None:
            s = router_statistic(gate.statistic, z_p, z_p)
            shift = gate.tau - s if gate.direction == "above" else s - gate.tau
            z_up = z_up * torch.sigmoid(shift / gate.temperature).to(z_p.dtype).unsqueeze(-1)
        z_a = z_p + z_up
        if head == "adapt":
            return z_a, None
        stat = router_statistic(router.statistic, z_p, z_a)
        keep = stat >= router.tau if router.direction == "above" else stat <= router.tau
        if pool is not None:
            keep = pool(keep)
        return torch.where(keep.unsqueeze(-1), z_p, z_a), keep


def _cosine(p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    dot, pp, aa = (p * a).sum(-1), (p * p).sum(-1), (a * a).sum(-1)
    denom = torch.sqrt(pp * aa)
    cos = torch.where(denom > 0, dot / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.ones_like(dot))
    return cos.clamp(-1.0, 1.0)  # an all-zero head keeps z_p


def router_statistic(name: str, z_p: torch.Tensor, z_a: torch.Tensor) -> torch.Tensor:
    """Per token (fp32): keep z_p where it is >= tau. cosine: cos(z_p, z_a); centered-cosine: the
    same on mean-centred logits; max-prob: max softmax(z_p); certainty: 1 - H(softmax(z_p)) / log V."""
    p, a = z_p.float(), z_a.float()
    if name == "cosine":
        return _cosine(p, a)
    if name == "centered-cosine":
        return _cosine(p - p.mean(-1, keepdim=True), a - a.mean(-1, keepdim=True))
    if name in ("max-prob", "certainty"):
        shifted = p - p.max(-1, keepdim=True).values
        e = shifted.exp()
        s = e.sum(-1)
        if name == "max-prob":
            return 1.0 / s
        entropy = s.log() - (e * shifted).sum(-1) / s
        vocab = p.shape[-1]
        return (1.0 - entropy / math.log(vocab)).clamp(0.0, 1.0) if vocab > 1 else torch.ones_like(s)
    raise ValueError(f"scale_router_statistic {name!r}: choose one of {STATISTICS}")


def _codes_of(codes: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    inside = (ids >= 0) & (ids < codes.numel())
    c = codes.to(ids.device)[ids.clamp(0, codes.numel() - 1)].long()
    return torch.where(inside, c, torch.full_like(c, EMPTY))


def _joins(codes: torch.Tensor, prev: torch.Tensor, cur: torch.Tensor, unit: str) -> torch.Tensor:
    """Whether predicted token `cur` joins the unit of `prev`, predicted just before it."""
    p, c = _codes_of(codes, prev), _codes_of(codes, cur)
    join = (c & CONT) != 0
    if unit == "word":
        join = join | ((c & SPACE_START) == 0) | ((p & SPACE_END) != 0)
    return (((p | c) & EMPTY) == 0) & join


def _owed_after(codes: torch.Tensor, ids: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """[b] UTF-8 continuation bytes still owed after the last token of each row (> 0: the text
    ends inside a character); `before`: owed before the first."""
    c = _codes_of(codes, ids)
    owed, all_cont = (c >> OWED_SHIFT) & 3, (c & ALL_CONT) != 0
    pos = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)
    last = torch.where(all_cont, torch.full_like(pos, -1), pos).max(-1).values
    spent = torch.where(all_cont & (pos > last.unsqueeze(-1)), owed, torch.zeros_like(owed)).sum(-1)
    base = torch.where(last < 0, before.to(owed), owed.gather(-1, last.clamp_min(0).unsqueeze(-1)).squeeze(-1))
    return (base - spent).clamp_min(0)


class UnitRouter:
    """One routing decision per UTF-8 character or word: each predicted token takes the decision of
    its unit's first token (causal: fixed when the unit starts). The unit of a predicted token is
    known from its bytes and the previous one's (the codes), except at the last position of the
    input, whose token is not there yet: it continues the open unit when the text so far ends
    inside a character (char, word) or, for word, always unless the last token is special; else it
    starts one. On a whole sequence this is exactly the Megatron model's routing at every position
    but the last (whose label the Megatron evaluation knows). Across calls that continue a KV cache
    (generate()), the state of the open unit is carried; the token the last call could not see is
    then known, and the open unit is what the known tokens make it."""

    def __init__(self, codes: torch.Tensor, unit: str, ids: torch.Tensor, carry: dict | None) -> None:
        self.codes, self.unit, self.ids, self.carry = codes, unit, ids, carry
        self.state: dict | None = None

    def __call__(self, keep: torch.Tensor) -> torch.Tensor:
        ids, codes, carry = self.ids, self.codes, self.carry
        b, n = ids.shape
        starts = torch.ones(b, n, dtype=torch.bool, device=ids.device)
        if n > 1:
            starts[:, :-1] = ~_joins(codes, ids[:, :-1], ids[:, 1:], self.unit)  # labels known: ids[j + 1]
        before = torch.zeros(b, dtype=torch.long, device=ids.device) if carry is None else carry["owed"]
        owed = _owed_after(codes, ids, before)
        if carry is not None or n > 1:  # the last position's label is not there yet
            last_empty = (_codes_of(codes, ids[:, -1]) & EMPTY) != 0
            starts[:, -1] = last_empty | ((owed == 0) if self.unit == "char" else torch.zeros_like(last_empty))
        open_keep = None
        if carry is not None:  # the previous call's last position: its label is ids[:, 0] now
            began = ~_joins(codes, carry["last_id"], ids[:, 0], self.unit) | carry["open_keep"].isnan()
            open_keep = torch.where(began, carry["own_keep"], carry["open_keep"].nan_to_num(0.0).bool())
        pos = torch.arange(n, device=ids.device).expand(b, n)
        first = torch.where(starts, pos, torch.full_like(pos, -1)).cummax(-1).values
        pooled = keep.gather(-1, first.clamp_min(0))
        if open_keep is not None:
            pooled = torch.where(first < 0, open_keep.unsqueeze(-1), pooled)
        # the unit decision at the second-to-last position is exact (its label was known)
        if n > 1:
            before_last = pooled[:, -2].float()
        elif open_keep is not None:
            before_last = open_keep.float()
        else:
            before_last = torch.full((b,), float("nan"), device=ids.device)
        self.state = {"last_id": ids[:, -1], "own_keep": keep[:, -1], "open_keep": before_last, "owed": owed}
        return pooled


def decode_codes(text: str, vocab: int) -> torch.Tensor:
    try:
        codes = torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)
    except ValueError as e:
        raise ValueError(f"scale_router_unit_codes: not base64 ({e})") from e
    if codes.numel() != vocab:
        raise ValueError(f"scale_router_unit_codes: {codes.numel()} codes for a vocabulary of {vocab}")
    return codes


def resized_codes(text: str, vocab: int) -> str:
    """The codes for a vocabulary resized to `vocab` (resize_token_embeddings): rows cut, or new
    tokens appended as EMPTY (a token with no bytes: it never joins a unit, as a special token)."""
    codes = torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)
    codes = torch.cat((codes[:vocab], torch.full((max(0, vocab - codes.numel()),), EMPTY, dtype=torch.uint8)))
    return base64.b64encode(codes.numpy().tobytes()).decode("ascii")

"""Routing units: which predicted tokens share one SCALE-Route decision (issue 35).

    token   every token decides alone (the paper's router)
    char    a token whose first byte is a UTF-8 continuation byte (0b10xxxxxx) joins the unit of
            the token before it: every byte token of one character takes one decision
    word    also joined unless it starts a whitespace run (whitespace after a token that does not
            end in it): one decision per whitespace-delimited word, with the whitespace before it
            (as byte-level BPE attaches it: " word"); characters are never split
    Special and added tokens (no byte form) are units of their own.

Units are over the labels (the tokens predicted at consecutive positions), never across rows.
The model decides a unit by its FIRST token's statistic (`first_of_units`): the only pooling
that is causal (fixed when the unit starts, never revised by a later token) and still gives one
decision per unit; route_eval/units.py also pools by the mean, for teacher-forced analysis.

What the model needs of the tokenizer is one small code per vocabulary entry (`piece_codes`):
whether it has bytes, starts with a continuation byte, starts or ends with whitespace, and the
UTF-8 continuation bytes still owed after it. From the codes and the labels, `unit_starts` marks
where units begin (vectorised, on the device); `pending_after` says whether a prefix ends inside
a character, which is what generation knows about a token it has not sampled yet. The exported
HF model (convert/hf_modeling) carries the same codes in its config and a copy of these rules.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

UNITS = ("token", "char", "word")
EMPTY, CONT, SPACE_START, SPACE_END, ALL_CONT = 1, 2, 4, 8, 16
OWED_SHIFT = 5  # bits 5-6: continuation bytes owed after the piece (all-continuation: how many it has)
_SPACE = frozenset(b" \t\n\r\x0b\x0c")


def _continuation(b: int) -> bool:
    return b & 0xC0 == 0x80


def _owed(piece: bytes) -> int:
    """Continuation bytes still owed after `piece` by its last lead byte (0 when it completes)."""
    for j in range(len(piece) - 1, -1, -1):
        b = piece[j]
        if not _continuation(b):
            need = 3 if b >= 0xF0 else 2 if b >= 0xE0 else 1 if b >= 0xC0 else 0
            return max(need - (len(piece) - 1 - j), 0)
    return 0


def piece_code(piece: bytes) -> int:
    """The code of one vocabulary entry's bytes (b"": a special or added token)."""
    if not piece:
        return EMPTY
    code = (CONT if _continuation(piece[0]) else 0) | (SPACE_START if piece[0] in _SPACE else 0)
    code |= SPACE_END if piece[-1] in _SPACE else 0
    if all(_continuation(b) for b in piece):
        return code | ALL_CONT | (min(len(piece), 3) << OWED_SHIFT)
    return code | (_owed(piece) << OWED_SHIFT)


def piece_codes(pieces: Sequence[bytes], vocab_size: int | None = None) -> torch.Tensor:
    """[vocab_size] uint8 codes of every token id's bytes (data/tokenizer.py token_bytes); ids past
    the tokenizer's (a padded vocabulary) are special: units of their own."""
    n = len(pieces) if vocab_size is None else vocab_size
    if n < len(pieces):
        raise ValueError(f"the tokenizer has {len(pieces)} tokens, more than the model's vocabulary of {n}")
    return torch.tensor([piece_code(p) for p in pieces] + [EMPTY] * (n - len(pieces)), dtype=torch.uint8)


def check_unit(unit: str, flag: str = "--route-unit") -> None:
    if unit not in UNITS:
        raise ValueError(f"{flag}: unknown unit {unit!r}; choose one of {', '.join(UNITS)}")


def _codes_of(codes: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    inside = (ids >= 0) & (ids < codes.numel())
    c = codes.to(ids.device)[ids.clamp(0, codes.numel() - 1)].long()
    return torch.where(inside, c, torch.full_like(c, EMPTY))


def joins(codes: torch.Tensor, prev: torch.Tensor, cur: torch.Tensor, unit: str) -> torch.Tensor:
    """Whether token `cur` joins the unit of the token `prev` predicted just before it (ids, any
    shape; out-of-range ids are special)."""
    check_unit(unit)
    p, c = _codes_of(codes, prev), _codes_of(codes, cur)
    if unit == "token":
        return torch.zeros(c.shape, dtype=torch.bool, device=c.device)
    both = ((p | c) & EMPTY) == 0
    join = (c & CONT) != 0
    if unit == "word":
        join = join | ((c & SPACE_START) == 0) | ((p & SPACE_END) != 0)
    return both & join


def unit_starts(codes: torch.Tensor, labels: torch.Tensor, unit: str) -> torch.Tensor:
    """[..., seq] bool: whether the label at each position starts a unit (the first of every row
    does)."""
    check_unit(unit)
    out = torch.ones(labels.shape, dtype=torch.bool, device=labels.device)
    if unit != "token" and labels.shape[-1] > 1:
        out[..., 1:] = ~joins(codes, labels[..., :-1], labels[..., 1:], unit)
    return out


def first_of_units(values: torch.Tensor, starts: torch.Tensor, dim: int = -1,
                   carry: torch.Tensor | None = None) -> torch.Tensor:
    """Each position's value replaced by the value at the first position of its unit (`starts`
    marks unit beginnings along `dim`). Positions before the first start of a row continue a unit
    begun earlier: they take `carry` (that row's value, the shape of `values` without `dim`);
    without a carry every row must start at its first position (unit_starts' rows do). No host
    sync: this runs in every routed forward."""
    dim = dim % values.dim()
    shape = [1] * values.dim()
    shape[dim] = values.shape[dim]
    pos = torch.arange(values.shape[dim], device=values.device).view(shape)
    first = torch.where(starts, pos, torch.full_like(pos, -1)).cummax(dim).values
    out = values.gather(dim, first.clamp_min(0))
    if carry is None:
        return out
    return torch.where(first < 0, carry.unsqueeze(dim), out)


def pending_after(codes: torch.Tensor, ids: torch.Tensor, before: torch.Tensor | None = None) -> torch.Tensor:
    """[rows] continuation bytes still owed after the last token of each row of `ids` [rows, n]
    (`before`: owed before its first token; default 0): > 0 means the text ends inside a character,
    so the next token continues it."""
    c = _codes_of(codes, ids)
    owed = (c >> OWED_SHIFT) & 3
    all_cont = (c & ALL_CONT) != 0
    n = ids.shape[-1]
    pos = torch.arange(n, device=ids.device).expand_as(ids)
    last = torch.where(all_cont, torch.full_like(pos, -1), pos).max(-1).values  # last token with a lead
    after = torch.where(all_cont & (pos > last.unsqueeze(-1)), owed, torch.zeros_like(owed)).sum(-1)
    base = owed.gather(-1, last.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    if before is not None:
        base = torch.where(last < 0, before.to(base), base)
    else:
        base = torch.where(last < 0, torch.zeros_like(base), base)
    return (base - after).clamp_min(0)

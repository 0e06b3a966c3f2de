"""Routing units: one router decision per UTF-8 character or per word instead of per token.

A byte-level tokenizer (SmolLM2's, Llama 3's, train_byte_bpe's) codes a Hangul syllable it has
not merged as about three byte tokens; within the syllable the next byte is near-certain for both
heads, so a per-token statistic measures confidence more than language, and one syllable's bytes
can go to different heads (issue 35). Here the tokens predicted at consecutive positions are
grouped into units and each unit takes one decision from its pooled statistic:

    token   every token is its own unit (the paper's router)
    char    a token starting with a UTF-8 continuation byte (0b10xxxxxx) joins the previous
            token's unit: every token of one character takes one decision
    word    also joined unless it starts a whitespace run (whitespace after a token that does
            not end in it): one decision per whitespace-delimited word, with the whitespace
            before it (as byte-level BPE attaches it: " word"); characters are never split

    pooled statistic of a unit = mean of its tokens' statistics ("mean", teacher-forced:
    evaluation only) or its first token's ("first": causal, what generation could do)

Units are over the labels (the tokens predicted), never across windows. Special and added tokens
(no byte form) are units of their own. The rule is the model's own (model/layers/route_units.py: a
routed model with --scale-router-unit char/word decides by the "first" pooling); this module adds
the tokenizer file and the teacher-forced mean. Pure tensors: no model needed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache

import torch

from megatron_scale.model.layers.route_units import UNITS, check_unit, piece_codes, unit_starts

__all__ = ["POOLS", "UNITS", "pool", "pooled_records", "starts", "token_bytes", "unit_ids"]

POOLS = ("mean", "first")


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes(tokenizer: str) -> list[bytes]:
    """The bytes of every token id of a byte-level BPE tokenizer.json (or a folder holding one);
    b"" for special and added tokens."""
    from tokenizers import Tokenizer

    file = os.path.join(tokenizer, "tokenizer.json") if os.path.isdir(tokenizer) else tokenizer
    if not os.path.isfile(file):
        raise ValueError(f"--tokenizer {tokenizer}: no tokenizer.json")
    tok = Tokenizer.from_file(file)
    table = _byte_of_char()
    added = set(tok.get_added_tokens_decoder())
    out = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        piece = tok.id_to_token(i)
        if i in added or piece is None or not all(c in table for c in piece):
            out.append(b"")
        else:
            out.append(bytes(table[c] for c in piece))
    if not any(out):
        raise ValueError(f"--tokenizer {tokenizer}: not a byte-level BPE tokenizer (no token maps to bytes)")
    return out


def starts(pieces: Sequence[bytes], labels: torch.Tensor, unit: str) -> torch.Tensor:
    """[rows, seq] bool: whether the token at each label position starts a unit (the first of
    every row always does): the model's rule (model/layers/route_units.py) on the tokenizer's pieces."""
    check_unit(unit)
    return unit_starts(piece_codes(pieces), labels.long(), unit)


def unit_ids(pieces: Sequence[bytes], labels: torch.Tensor, unit: str) -> torch.Tensor:
    """[rows * seq] int64 unit index of each label position, row-major (the order route_eval's
    records are in); consecutive positions of one unit share it, and no unit spans two rows."""
    return starts(pieces, labels, unit).flatten().long().cumsum(0) - 1


def pool(stat: torch.Tensor, units: torch.Tensor, how: str = "mean") -> torch.Tensor:
    """Each token's statistic replaced by its unit's pooled one (`units` from unit_ids, same
    length, non-decreasing): the mean over the unit's tokens, or its first token's."""
    if how not in POOLS:
        raise ValueError(f"--route-pool: unknown pooling {how!r}; choose one of {', '.join(POOLS)}")
    if stat.shape != units.shape:
        raise ValueError(f"pool: {stat.numel()} statistics for {units.numel()} unit ids")
    if stat.numel() == 0:
        return stat
    n = int(units[-1]) + 1
    if how == "first":
        first = torch.full((n,), stat.numel(), dtype=torch.long, device=stat.device).scatter_reduce(
            0, units, torch.arange(stat.numel(), device=stat.device), "amin")
        return stat[first[units]]
    total = torch.zeros(n, dtype=torch.float64, device=stat.device).index_add_(0, units, stat.double())
    count = torch.bincount(units, minlength=n).double()
    return (total / count)[units].to(stat.dtype)


def pooled_records(records: dict[str, torch.Tensor], labels: torch.Tensor, pieces: Sequence[bytes], unit: str,
                   how: str = "mean") -> dict[str, torch.Tensor]:
    """route_eval records (one per label of `labels` [rows, seq], row-major) with every router
    statistic ("stat/*") pooled per unit; losses and correctness stay per token."""
    if unit == "token":
        return dict(records)
    units = unit_ids(pieces, labels, unit)
    if units.numel() != records["loss_p"].numel():
        raise ValueError(f"pooled_records: {records['loss_p'].numel()} records for {units.numel()} labels")
    return {k: pool(v, units, how) if k.startswith("stat/") else v for k, v in records.items()}

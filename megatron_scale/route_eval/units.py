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
routed model with --scale-router-unit char/word decides by the "first" pooling) on the tokenizer's
pieces (data/tokenizer.py token_bytes); this module adds the teacher-forced mean. Pure tensors:
no model needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from megatron_scale.model.layers.route_units import UNITS, check_unit, piece_codes, unit_starts

__all__ = ["POOLS", "UNITS", "pool", "pooled_records", "starts", "unit_ids"]

POOLS = ("mean", "first")


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

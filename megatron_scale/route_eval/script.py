"""Routing by Unicode script, per character: SCALE-Route with no statistic at all (issue 45).

Korean is the one new script here: a character of Hangul goes to z_a, every other to z_p. Two
routers, both per UTF-8 character (route_eval/units.py's "char": every token of a character takes
one decision, so a syllable's byte tokens never split between heads):

    script oracle     the predicted character's own script. It knows what it predicts, so it is
                      no router one could deploy; it is the upper bound of every router that
                      sends Korean characters to z_a and the rest to z_p.
    previous script   the script of the character before it in the window: causal (generation
                      knows every earlier character), needs no calibration and no model output.
                      The first character of a window has none before it and stays on z_p.

Each router is expressed as a 0/1 statistic (1: Hangul) kept on z_p at or below 0.5, so that
route_eval/curves.py scores it like any other router. Characters come from the tokenizer's pieces
(data/tokenizer.py token_bytes): the bytes of a character's tokens, decoded. Pure tensors and
bytes: no model needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from megatron_scale.model.layers.output_rows import HANGUL
from megatron_scale.route_eval.units import unit_ids

ORACLE, PREVIOUS = "stat/script_oracle", "stat/script_previous"
TAU, DIRECTION = 0.5, "below"  # keep on z_p where the statistic is 0 (not Hangul)


def is_hangul(text: str) -> bool:
    """Whether any character of `text` is Hangul."""
    return any(lo <= ord(c) <= hi for c in text for lo, hi in HANGUL)


def unit_hangul(pieces: Sequence[bytes], labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per label position of `labels` [rows, seq], row-major: (whether its character is Hangul,
    whether the character before it in its row is). A token with no byte form (a special token)
    counts as no script."""
    units = unit_ids(pieces, labels, "char")
    n = int(units[-1]) + 1 if units.numel() else 0
    chunks: list[bytearray] = [bytearray() for _ in range(n)]
    for u, t in zip(units.tolist(), labels.reshape(-1).tolist()):
        if 0 <= t < len(pieces):
            chunks[u] += pieces[t]
    hangul = torch.tensor([is_hangul(c.decode("utf-8", errors="replace")) for c in chunks], dtype=torch.bool,
                          device=units.device)
    # the character before each one, within its row: a row's first character has none
    before = torch.zeros_like(hangul)
    before[1:] = hangul[:-1]
    before[units.view(-1, labels.shape[-1])[:, 0]] = False
    return hangul[units], before[units]


def with_script_statistics(records: dict[str, torch.Tensor], pieces: Sequence[bytes], seq_length: int) -> dict[str, torch.Tensor]:
    """A set's records with the two script routers' statistics added (ORACLE, PREVIOUS: 1.0 where
    the router sends the token to z_a)."""
    labels = records["labels"].view(-1, seq_length)
    own, before = unit_hangul(pieces, labels)
    if own.numel() != records["loss_p"].numel():
        raise ValueError(f"script router: {records['loss_p'].numel()} records for {own.numel()} labels")
    return {**records, ORACLE: own.float(), PREVIOUS: before.float()}

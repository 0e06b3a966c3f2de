"""model/layers/route_units.py on the hand-made byte-level vocabulary and Korean string (tests/_unit_vocab.py):
the owed continuation bytes after every prefix are what decoding the prefix's bytes says (a prefix
ends inside a character exactly when it does not decode); the first-token pooling, with and
without a carried unit; the vocabulary padding and a tokenizer larger than the model."""

from __future__ import annotations

import pytest
import torch

from megatron_scale.model.layers.route_units import (
    EMPTY,
    first_of_units,
    pending_after,
    piece_code,
    piece_codes,
    unit_starts,
)
from tests import _unit_vocab


def _inside_a_character(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.reason == "unexpected end of data"
    return False


def test_owed_bytes_say_where_a_character_is_unfinished() -> None:
    table = _unit_vocab.pieces()
    codes = piece_codes(table)
    ids = _unit_vocab.encode(_unit_vocab.KOREAN, table)
    inside = []
    for k in range(1, len(ids) + 1):
        owed = int(pending_after(codes, torch.tensor([ids[:k]]))[0])
        data = b"".join(table[i] for i in ids[:k])
        assert (owed > 0) == _inside_a_character(data), (k, data)
        inside.append(owed > 0)
    assert any(inside) and not all(inside)
    # split across calls: what is owed before the second part carries over
    half = len(ids) // 2
    before = pending_after(codes, torch.tensor([ids[:half]]))
    assert torch.equal(pending_after(codes, torch.tensor([ids[half:]]), before), pending_after(codes, torch.tensor([ids])))
    assert piece_code(b"") == EMPTY and codes[0] == EMPTY


def test_first_of_units_with_and_without_a_carry() -> None:
    values = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    starts = torch.tensor([[True, False, True, False, False], [False, False, True, True, False]])
    carry = torch.tensor([0, -1])
    assert first_of_units(values, starts, carry=carry).tolist() == [[1, 1, 3, 3, 3], [-1, -1, 8, 9, 9]]
    assert first_of_units(values.t(), starts.t(), dim=0, carry=carry).t().tolist() == [[1, 1, 3, 3, 3], [-1, -1, 8, 9, 9]]
    labels = torch.tensor([_unit_vocab.encode(_unit_vocab.KOREAN, _unit_vocab.pieces())])
    assert bool(unit_starts(piece_codes(_unit_vocab.pieces()), labels, "token").all())


def test_padded_vocabulary_and_a_larger_tokenizer() -> None:
    table = _unit_vocab.pieces()
    codes = piece_codes(table, len(table) + 4)
    assert codes.numel() == len(table) + 4 and bool((codes[len(table):] == EMPTY).all())
    with pytest.raises(ValueError, match="more than the model's vocabulary"):
        piece_codes(table, len(table) - 1)
    with pytest.raises(ValueError, match="--route-unit: unknown unit 'byte'"):
        unit_starts(codes, torch.zeros(1, 3, dtype=torch.long), "byte")

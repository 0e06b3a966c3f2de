"""What a method takes from the tokenizer (TrainingMethod.attach, Scale.route_codes), the one
hand-over training, evaluation and the Hugging Face export share: a plain model takes nothing; a
SCALE-Route model the tokenizer's per-token codes, refused by name where its router unit needs
them and the tokenizer cannot give them. (The models themselves: tests/training/test_route_override.py,
tests/training/test_output_rows.py, tests/evaluation/test_megatron_choices.py, tests/convert.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch


@dataclass(frozen=True)
class _Tokens:
    path: str | None
    flag: str = "--tokenizer-model"
    table: tuple[bytes, ...] = ()

    def token_bytes(self) -> list[bytes]:
        if not any(self.table):
            raise ValueError(f"--tokenizer {self.path}: not a byte-level BPE tokenizer")
        return list(self.table)


def _scale(variant: str, unit: str = "token") -> Any:
    from megatron_scale.methods import Scale
    from megatron_scale.scale_config import ScaleConfig
    from tests import _tiny

    return Scale(dims=ScaleConfig(variant=variant, router_unit=unit).resolve(_tiny.base_config(1)))


def test_a_plain_model_takes_nothing_and_only_a_route_model_takes_codes() -> None:
    from megatron_scale.methods import Full
    from megatron_scale.scale_config import RouterOverride
    from tests import _unit_vocab

    assert Full().attach(torch.nn.Linear(1, 1), _Tokens(None)) == []
    table = tuple(_unit_vocab.pieces(96))
    assert _scale("preserve").route_codes(_Tokens("tok", table=table), 96) is None
    codes = _scale("route").route_codes(_Tokens("tok", table=table), 96)
    assert codes is not None and codes.shape == (96,) and codes.dtype == torch.uint8
    # per token, a tokenizer without bytes (or none at all) gives no codes and no error
    assert _scale("route").route_codes(_Tokens("sp.model"), 96) is None
    assert _scale("route").route_codes(_Tokens(None), 96) is None
    with pytest.raises(ValueError, match=r"^router unit 'char' \(--route-unit\): deciding per char needs the "
                                         r"byte-level tokenizer: give --tokenizer-model$"):
        _scale("route").route_codes(_Tokens(None), 96, RouterOverride(unit="char"))
    with pytest.raises(ValueError, match=r"^--tokenizer-model sp.model: router unit 'word': "):
        _scale("route", "word").route_codes(_Tokens("sp.model"), 96)


def test_only_scale_may_skip_the_base_backward() -> None:
    from megatron_scale.methods import Full

    Full().check_base_backward("full")
    with pytest.raises(ValueError, match="^--scale-base-backward skip: --method full trains"):
        Full().check_base_backward("skip")
    _scale("preserve").check_base_backward("skip")

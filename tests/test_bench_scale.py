"""tools/bench_scale.py's variants of Preserve (issue 45): preserve_rows and preserve_gate build the
Preserve model with the rows scoped (a script's share of the vocabulary) and with the gate on,
and a scope without an output layer is refused, naming the flags."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._dist import run_ranks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_scale  # noqa: E402

SMALL = ["--hidden", "64", "--heads", "8", "--groups", "4", "--ffn", "128", "--layers", "1", "--vocab", "1200",
         "--seq", "16"]


def _built(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.model.layers.heads import output_layers

    ap = argparse.Namespace(**{k.lstrip("-"): int(v) for k, v in zip(SMALL[::2], SMALL[1::2], strict=True)},
                            device="cpu", transformer_impl="local", attention_backend="auto", fp8_format=None,
                            fp8_recipe=None, bf16=False, scale_te_linear=None, fusions=())
    bench_scale._init(ap)
    out = {}
    for m in ("preserve", "preserve_rows", "preserve_gate"):
        (layer,) = output_layers(bench_scale._build(ap, "model", m))
        scope = getattr(layer, "row_scope", None)
        out[m] = (layer.gate_statistic, layer.gate_tau, None if scope is None else int(scope.sum()))
    return out


def test_the_variants_build_preserve_with_rows_or_gate() -> None:
    (got,) = run_ranks(_built, 1)
    assert got["preserve"] == ("none", 0.5, None)
    assert got["preserve_rows"] == ("none", 0.5, 3)  # rows 0, 552, 1104 of 1,200
    assert got["preserve_gate"] == ("max-prob", 0.8, None)


def test_a_layer_scope_is_refused_for_the_variants(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench_scale.main([*SMALL, "--methods", "preserve", "preserve_gate", "preserve_rows"])
    assert e.value.code == 2
    assert ("--methods preserve_gate preserve_rows: the variants act on the output layer; give --scopes model"
            in capsys.readouterr().err)

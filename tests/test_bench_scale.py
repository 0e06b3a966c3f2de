"""tools/bench_scale.py's variants of Preserve (issue 45): preserve_rows and preserve_gate build the
Preserve model with the rows scoped (a script's share of the vocabulary) and with the gate on,
and a scope without an output layer is refused, naming the flags; preserve_full (issue 62) builds
it with the base stream's backward computed, and each is predicted with the backward it runs."""

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
                            fp8_recipe=None, bf16=False, scale_te_linear=None, scale_local_linear="fused", fusions=())
    bench_scale._init(ap)
    out = {}
    for m in ("preserve", "preserve_rows", "preserve_gate", "preserve_full"):
        model = bench_scale._build(ap, "model", m)
        (layer,) = output_layers(model)
        scope = getattr(layer, "row_scope", None)
        out[m] = (layer.gate.statistic, layer.gate.tau, None if scope is None else int(scope.sum()))
        out[f"{m}/backward"] = model.scale_dims.training.base_backward
    return out


def test_the_variants_build_preserve_with_rows_or_gate() -> None:
    (got,) = run_ranks(_built, 1)
    assert got["preserve"] == ("none", 0.5, None)
    assert got["preserve_rows"] == ("none", 0.5, 3)  # rows 0, 552, 1104 of 1,200
    assert got["preserve_gate"] == ("max-prob", 0.8, None)
    assert got["preserve_full"] == ("none", 0.5, None)
    # issue 62: Preserve and its variants skip the base stream's backward, preserve_full computes it
    assert [got[f"{m}/backward"] for m in ("preserve", "preserve_rows", "preserve_gate", "preserve_full")] == [
        "skip", "skip", "skip", "full"]


def test_preserve_is_predicted_with_the_skip_and_preserve_full_without() -> None:
    """The FLOP prediction of each method is the one its model runs (model/flops.py): at the
    default shape Preserve 0.569x full fine-tuning per token, Preserve with the full backward 0.980x."""
    a = argparse.Namespace(hidden=1024, heads=16, groups=4, ffn=2816, layers=4, vocab=16384, seq=512)
    full = bench_scale._predicted(a, "model", "full_ft")
    assert round(bench_scale._predicted(a, "model", "preserve") / full, 3) == 0.569
    assert round(bench_scale._predicted(a, "model", "preserve_full") / full, 3) == 0.980
    assert bench_scale._predicted(a, "model", "preserve_gate") == bench_scale._predicted(a, "model", "preserve")
    assert bench_scale._predicted(a, "layer", "preserve") < bench_scale._predicted(a, "layer", "preserve_full")


def test_a_layer_scope_is_refused_for_the_variants(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench_scale.main([*SMALL, "--methods", "preserve", "preserve_gate", "preserve_rows"])
    assert e.value.code == 2
    assert ("--methods preserve_gate preserve_rows: the variants act on the output layer; give --scopes model"
            in capsys.readouterr().err)

"""The FLOP model behind tools/bench_scale.py (megatron_scale/model/flops.py).

Checked by hand-countable cases: one linear's step costs 6nm trained and 4nm frozen; an upscaled
linear at +1/4 sizes costs 0.979x full fine-tuning of the base and 0.627x the dense expanded
linear (the issue's 0.98x / 0.63x); attention scales with the heads; Adapt adds W12's 6mn'."""

from __future__ import annotations

import pytest

from megatron_scale.model import flops

SHAPE = flops.Shape(hidden=1024, heads=16, groups=4, head_dim=64, ffn=2816,
                    hidden_up=256, heads_up=4, groups_up=1, ffn_up=704)


def test_one_linear_at_quarter_sizes() -> None:
    n, m = 1024, 4096
    scale = flops.scale_linear(n, n // 4, m, m // 4, adapt=False)
    assert scale / flops.dense_linear(n, m) == pytest.approx(0.979, abs=5e-4)
    assert scale / flops.dense_linear(n + n // 4, m + m // 4) == pytest.approx(0.627, abs=5e-4)
    assert flops.scale_linear(n, n // 4, m, m // 4, adapt=True) - scale == 6 * m * (n // 4)


def test_layer_without_attention_matches_the_linear_ratio() -> None:
    # seq 0 removes attention: the layer is its four linears, each at exactly +1/4 except qkv's
    # g' = g/4 rows, so the ratios are those of one linear.
    assert flops.layer_flops("preserve", SHAPE, 0) / flops.layer_flops("full_ft", SHAPE, 0) == pytest.approx(0.979, abs=1e-3)
    assert flops.layer_flops("preserve", SHAPE, 0) / flops.layer_flops("dense_up", SHAPE, 0) == pytest.approx(0.627, abs=1e-3)


def test_attention_counts_every_head() -> None:
    seq = 512
    full = flops.layer_flops("full_ft", SHAPE, seq) - flops.layer_flops("full_ft", SHAPE, 0)
    up = flops.layer_flops("preserve", SHAPE, seq) - flops.layer_flops("preserve", SHAPE, 0)
    assert full == 12 * seq * 16 * 64 and up == 12 * seq * 20 * 64


def test_model_adds_layers_and_the_head() -> None:
    layers, vocab = 4, 1000
    adapt = flops.model_flops("adapt", SHAPE, 8, layers, vocab, adapt_layers=2)
    assert adapt == (2 * flops.layer_flops("adapt", SHAPE, 8) + 2 * flops.layer_flops("preserve", SHAPE, 8)
                     + 4 * 1024 * vocab + 6 * 256 * vocab)
    with pytest.raises(ValueError, match="unknown method 'lora'"):
        flops.layer_flops("lora", SHAPE, 8)


def test_skipping_the_base_backward_leaves_out_the_dead_terms() -> None:
    """Issue 62: without the base dgrad (2nm), the new rows' dgrad into the base features (2m'n),
    the base heads' backward (8 s k each) and W_out's dgrad (2Vd), an upscaled linear costs
    0.5625x full fine-tuning at +1/4 sizes, and the bench's default model 226 against 396 MFLOP
    per token (the issue's arithmetic). Adapt's W12 needs the full backward: refused."""
    n, m = 1024, 4096
    skip = flops.scale_linear(n, n // 4, m, m // 4, adapt=False, skip_base_backward=True)
    assert skip == flops.scale_linear(n, n // 4, m, m // 4, adapt=False) - 2 * n * m - 2 * (m // 4) * n
    assert skip / flops.dense_linear(n, m) == 0.5625
    seq = 512
    attn = (flops.layer_flops("preserve", SHAPE, seq, skip_base_backward=True)
            - flops.layer_flops("preserve", SHAPE, 0, skip_base_backward=True))
    assert attn == 4 * seq * 16 * 64 + 12 * seq * 4 * 64
    assert flops.head_flops("preserve", SHAPE, 100, skip_base_backward=True) == 2 * 1024 * 100 + 6 * 256 * 100
    full_ft = flops.model_flops("full_ft", SHAPE, seq, 4, 16384)
    preserve = flops.model_flops("preserve", SHAPE, seq, 4, 16384, skip_base_backward=True)
    assert (round(preserve / 1e6), round(full_ft / 1e6)) == (226, 396)
    with pytest.raises(ValueError, match="W12's gradient needs the base stream's backward"):
        flops.model_flops("adapt", SHAPE, seq, 4, 16384, adapt_layers=2, skip_base_backward=True)

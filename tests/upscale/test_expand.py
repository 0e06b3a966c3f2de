"""Upscaling a base state dict (pure tensors, no process group): base tensors untouched, the
blocks that touch the base path start at zero, new norm gains at one, the new rows follow the
chosen init per row group, and the whole thing is deterministic for a seed."""

from __future__ import annotations

import pytest
import torch

from megatron_scale.scale_config import ScaleConfig
from megatron_scale.model.weights.layout import split_qkv
from megatron_scale.upscale import upscale_state_dict
from tests import _tiny

QKV = "decoder.layers.self_attention.linear_qkv."
PROJ = "decoder.layers.self_attention.linear_proj."
FC1 = "decoder.layers.mlp.linear_fc1."


def _up(**kw: object) -> tuple[dict, dict, object]:
    base = _tiny.base_state_dict(tied=True)
    dims = ScaleConfig(**kw).resolve(_tiny.base_config(1))  # type: ignore[arg-type]
    return base, upscale_state_dict(base, dims), dims


def test_base_untouched_and_preserving_blocks() -> None:
    base, up, dims = _up(variant="adapt")
    for k, v in base.items():
        assert up[k] is v
    assert torch.count_nonzero(up["embedding.word_embeddings.weight_up"]) == 0
    assert torch.count_nonzero(up["output_layer.weight_up"]) == 0
    for k in (QKV + "layer_norm_weight_up", FC1 + "layer_norm_weight_up", "decoder.final_layernorm.weight_up"):
        assert torch.all(up[k] == 1)
    w12 = sorted(k for k in up if ".weight_12." in k)
    assert w12 == sorted(f"{path}weight_12.layer{i}" for path in (QKV, PROJ) for i in (2, 3))
    assert all(torch.count_nonzero(up[k]) == 0 for k in w12)
    assert up[QKV + "weight_21"].shape == (dims.num_layers, dims.qkv_rows(True), dims.hidden)
    assert up[QKV + "weight_22"].shape == (dims.num_layers, dims.qkv_rows(True), dims.hidden_up)


def test_svd_rows_per_row_group() -> None:
    base, up, dims = _up(init="svd", init_std=0.01)
    layer = 1
    w = base[QKV + "weight"][layer]
    new = up[QKV + "weight_21"][layer]
    for b, n in zip(split_qkv(w, dims.groups, dims.head_dim), split_qkv(new, dims.groups_up, dims.head_dim), strict=True):
        target = torch.linalg.matrix_norm(b) / b.shape[0] ** 0.5
        torch.testing.assert_close(n.norm(dim=1), target.expand(n.shape[0]), rtol=1e-5, atol=1e-6)
        _, _, vh = torch.linalg.svd(b, full_matrices=False)
        torch.testing.assert_close((n / target).abs(), vh[: n.shape[0]].abs(), rtol=1e-4, atol=1e-5)
    w22 = up[QKV + "weight_22"]
    assert 0.005 < float(w22.std()) < 0.02
    gate, upp = up[FC1 + "weight_21"][layer].chunk(2)
    bgate, bup = base[FC1 + "weight"][layer].chunk(2)
    for n, b in ((gate, bgate), (upp, bup)):
        _, _, vh = torch.linalg.svd(b, full_matrices=False)
        assert torch.allclose((n[0] / n[0].norm()).abs(), vh[0].abs(), atol=1e-5)


@pytest.mark.parametrize("init", ["normal", "zero"])
def test_other_inits(init: str) -> None:
    _, up, _ = _up(init=init, init_std=0.1)
    blocks = torch.cat([up[k].flatten() for k in up if k.endswith(("weight_21", "weight_22"))])
    if init == "zero":
        assert torch.count_nonzero(blocks) == 0
    else:
        assert 0.09 < float(blocks.std()) < 0.11 and abs(float(blocks.mean())) < 0.01


def test_deterministic_for_a_seed() -> None:
    _, a, _ = _up(seed=5)
    _, b, _ = _up(seed=5)
    _, c, _ = _up(seed=6)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a[QKV + "weight_22"], c[QKV + "weight_22"])


def test_bad_base_is_named() -> None:
    dims = ScaleConfig().resolve(_tiny.base_config(1))
    with pytest.raises(KeyError, match="embedding.word_embeddings.weight"):
        upscale_state_dict({}, dims)
    base = _tiny.base_state_dict(tied=True)
    del base[FC1 + "weight"]
    with pytest.raises(KeyError, match="linear_fc1.weight"):
        upscale_state_dict(base, dims)


def test_llama_pro_depth_expansion() -> None:
    from megatron_scale.upscale.depth import expand_depth, new_block_indices

    assert new_block_indices(4, 2) == [2, 5]
    assert new_block_indices(32, 8) == [4, 9, 14, 19, 24, 29, 34, 39]
    with pytest.raises(ValueError, match="--llama-pro-blocks"):
        new_block_indices(4, 3)
    base = _tiny.base_state_dict(tied=True)
    out = expand_depth(base, _tiny.LAYERS, 2)
    qkv, proj = QKV + "weight", PROJ + "weight"
    assert out[qkv].shape[0] == 6
    # expanded order: base 0, 1, copy of 1, base 2, 3, copy of 3
    for i, src in enumerate([0, 1, 1, 2, 3, 3]):
        assert torch.equal(out[qkv][i], base[qkv][src])
    for i in (2, 5):
        assert torch.count_nonzero(out[proj][i]) == 0
        assert torch.count_nonzero(out["decoder.layers.mlp.linear_fc2.weight"][i]) == 0
    assert torch.equal(out[proj][4], base[proj][3])
    assert out["embedding.word_embeddings.weight"] is base["embedding.word_embeddings.weight"]

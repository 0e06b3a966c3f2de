"""model/weights/layout.py: megatron-core's fused qkv layout as pure tensor functions (the gate/up
layout and both through conversion: tests/convert/test_keymap.py)."""

from __future__ import annotations

import torch

from megatron_scale.model.weights.layout import merge_qkv, split_qkv
from tests import _tiny


def test_layout_round_trip() -> None:
    w = torch.randn((_tiny.HEADS + 2 * _tiny.GROUPS) * _tiny.HEAD_DIM, 5)
    q, k, v = split_qkv(w, _tiny.GROUPS, _tiny.HEAD_DIM)
    assert q.shape[0] == _tiny.HEADS * _tiny.HEAD_DIM and k.shape == v.shape
    assert torch.equal(merge_qkv(q, k, v, _tiny.GROUPS, _tiny.HEAD_DIM), w)
    # group 1's key head sits after group 1's query heads
    ratio = _tiny.HEADS // _tiny.GROUPS
    start = (ratio + 2) * _tiny.HEAD_DIM + ratio * _tiny.HEAD_DIM
    assert torch.equal(k[_tiny.HEAD_DIM : 2 * _tiny.HEAD_DIM], w[start : start + _tiny.HEAD_DIM])

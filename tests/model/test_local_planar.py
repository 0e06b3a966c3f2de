"""--scale-local-linear planar: te_fused.py's one-node composition over torch ops (torch_ops.py) on
the local path, with no Transformer Engine and no stand-in. (How te_fused.py composes its calls is
tests/model/layers/test_te_fused.py's, with a stand-in that records them; the copies it saves are
tests/model/test_step_audit.py's.) Here:

- one rank, in process: the planar model equals the fused local one (logits, every gradient by
  checkpoint key; Preserve under the full and the skipped base backward, Adapt, Route), its Preserve head is bitwise the
  base model's, every module calls TORCH_OPS, and decoding (megatron-core's inference context) is
  refused by name;
- the training entry end to end (torchrun, TP 2 with sequence parallelism, megatron-core's DDP and
  optimizer, resumed with fused.py from its checkpoint): tests/training/test_train_entry.py;
- the flag is refused with --transformer-impl transformer_engine (tests/training/test_kernels.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks
from tests.model.layers.test_te_fused import _grads_by_key, _models, _rel, _step

pytestmark = pytest.mark.dist


def _in_process(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.model.layers.spec import local_backend
    from megatron_scale.model.layers.te_fused import ScaleTEFinalNorm, _FusedLinear
    from megatron_scale.model.layers.torch_ops import TORCH_OPS
    from megatron_scale.scale_config import ScaleConfig

    init_distributed(1, 1, device="cpu", seed=1234)
    b = _tiny.batch(seed=5)
    out: dict[str, Any] = {}
    adapt = ScaleConfig(variant="adapt", adapt_modules=("qkv", "proj", "fc1", "fc2"))
    for backward, scale in (("full", ScaleConfig(variant="preserve", base_backward="full")),
                            ("adapt", adapt), ("route", ScaleConfig(variant="route")),
                            ("auto", ScaleConfig(variant="preserve"))):  # last: its model is the one below
        fused, planar = _models(1, False, scale, local_backend("local", linear="planar"))  # off the zero init
        mods = [m for m in planar.modules() if isinstance(m, _FusedLinear | ScaleTEFinalNorm)]
        z_fused, z_planar = _step(fused, b), _step(planar, b)
        out[backward] = {"logits_err": float((z_fused - z_planar).abs().max()),
                         "grad_rel_err": _rel(_grads_by_key(fused), _grads_by_key(planar)),
                         "modules": len(mods), "torch_ops": all(m.ops is TORCH_OPS for m in mods),
                         "skip": planar.scale_dims.skip_base_backward}
    base = _tiny.build_base(_tiny.base_config(1), False, _tiny.base_state_dict(tied=False)).eval()
    with torch.no_grad(), output_head(planar, "preserve"):
        ref = base(b["input_ids"], b["position_ids"], b["attention_mask"])
        out["preserve_head_bitwise"] = torch.equal(planar(b["input_ids"], b["position_ids"], b["attention_mask"]), ref)
    try:
        planar(b["input_ids"], b["position_ids"], b["attention_mask"], inference_context=object())
        out["decode"] = "ran"
    except ValueError as e:
        out["decode"] = str(e)
    return out


@pytest.fixture(scope="module")
def one_rank() -> dict[str, Any]:
    return run_ranks(_in_process, 1)[0]


def test_planar_computes_the_fused_local_model(one_rank: dict) -> None:
    assert not one_rank["full"]["skip"] and one_rank["auto"]["skip"], one_rank
    for backward in ("full", "auto", "adapt", "route"):
        r = one_rank[backward]
        assert r["modules"] == 4 * _tiny.LAYERS + 1 and r["torch_ops"], r
        assert r["logits_err"] < 1e-5 and r["grad_rel_err"] < 1e-5, (backward, r)
    assert one_rank["preserve_head_bitwise"]


def test_decoding_is_refused_by_name(one_rank: dict) -> None:
    assert "--scale-local-linear planar hold the stream planar" in one_rank["decode"], one_rank["decode"]
    assert "--scale-local-linear fused" in one_rank["decode"]

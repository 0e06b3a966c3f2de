"""Each method's model as the training entry builds it (build, prepare) and fills it from a base
(load_initial, through methods/load.py load_model as --load does), in one spawned rank:
- what it trains is exactly what its formula counts, and LLaMA-Pro's grown model computes the base
  function bitwise;
- from a base checkpoint each method says what it loaded (base, base+depth, base+upscale,
  base+lora) and starts at the base function bitwise (SCALE: its preservation head)."""

from __future__ import annotations

from typing import Any

import contextlib
from pathlib import Path

import pytest
import torch

from tests._dist import run_ranks
from tests.methods._loading import built, loaded

pytestmark = pytest.mark.dist


def _body(rank: int, world: int, root: str) -> dict[str, Any]:
    from megatron_scale.checkpoint import save_checkpoint
    from megatron_scale.distributed import init_distributed
    from megatron_scale.methods import Full
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.model.weights.state import load_global_state_dict
    from megatron_scale.upscale.depth import expand_depth
    from tests import _tiny

    init_distributed(1, 1, device="cpu")
    out: dict[str, Any] = {}
    for method, extra in (("full", ()), ("freeze", ("--freeze-layers", "3")), ("scale-preserve", ()),
                          ("scale-adapt", ()), ("scale-route", ()), ("llama-pro", ("--llama-pro-blocks", "2"))):
        model = built(method, 1, *extra)
        out[method] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    for rank in (8, 2):  # 8: the default
        model = built("lora", 1, *(() if rank == 8 else ("--lora-rank", str(rank))))
        out[f"lora-r{rank}"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["lora_trained_names"] = sorted({n.rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad})
    # LLaMA-Pro's expanded model computes the base function exactly.
    state = _tiny.base_state_dict(tied=True)
    base = _tiny.build_base(_tiny.base_config(1), True, state).eval()
    pro = built("llama-pro", 1, "--llama-pro-blocks", "2").to(_tiny.device()).eval()
    load_global_state_dict(pro, expand_depth(state, _tiny.LAYERS, 2))
    b = _tiny.batch(seed=6)
    with torch.no_grad():
        out["llama_pro_bitwise"] = torch.equal(
            pro(b["input_ids"], b["position_ids"], b["attention_mask"]),
            base(b["input_ids"], b["position_ids"], b["attention_mask"]),
        )
    out["llama_pro_trainable_layers"] = sorted(
        layer.layer_number - 1 for layer in pro.decoder.layers if any(p.requires_grad for p in layer.parameters())
    )
    # each method's first weights from the base's checkpoint, as the training entry's --load
    ckpt = Path(root) / "base"
    save_checkpoint(base, ckpt, method=Full())
    with torch.no_grad():
        ref = base(b["input_ids"], b["position_ids"], b["attention_mask"])
    out["loads"] = {}
    # one method of each load_initial (Freeze loads as Full, every SCALE variant as Preserve)
    for method, extra in (("full", ()), ("llama-pro", ("--llama-pro-blocks", "2")), ("scale-preserve", ()), ("lora", ())):
        model, kind = loaded(str(ckpt), method, 1, *extra)
        model = model.to(_tiny.device()).eval()
        scale = getattr(model, "scale_dims", None) is not None
        with torch.no_grad(), output_head(model, "preserve") if scale else contextlib.nullcontext():
            same = torch.equal(model(b["input_ids"], b["position_ids"], b["attention_mask"]), ref)
        out["loads"][method] = (kind, same)
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_ranks(_body, 1, str(tmp_path_factory.mktemp("methods")))[0]


def test_each_method_trains_what_its_formula_counts(results: dict[str, Any]) -> None:
    V, L, d, h, g, f = 96, 4, 64, 16, 8, 128
    k = d // h
    du, hu, gu, fu = d // 4, h // 4, g // 4, f // 4
    layer = (h + 2 * g) * k * d + d * h * k + 2 * f * d + d * f + 2 * d   # qkv, proj, fc1, fc2, 2 norms
    full = V * d + L * layer + d                                          # tied embedding, final norm
    freeze = full - V * d - 3 * layer
    per_layer_up = ((hu + 2 * gu) * k * (d + du) + du * (h + hu) * k       # [W21 W22] of qkv, proj
                    + 2 * fu * (d + du) + du * (f + fu) + 2 * du)          # fc1, fc2, norm gains
    preserve = V * du + V * du + L * per_layer_up + du                     # E_up, W_out_up, final gain
    adapt = preserve + (L // 2) * ((h + 2 * g) * k * du + d * hu * k)      # W12: qkv, proj, upper half
    def lora(r: int) -> int:  # A [r, in] and B [out, r] of qkv, proj, fc1, fc2 in every layer
        return L * r * ((d + (h + 2 * g) * k) + (h * k + d) + (d + 2 * f) + (f + d))

    got = {k: v for k, v in results.items() if k != "loads"}
    assert got.pop("llama_pro_bitwise")
    assert got.pop("llama_pro_trainable_layers") == [2, 5]   # after each half of the 4 base layers
    assert got.pop("lora_trained_names") == ["lora_a", "lora_b"]
    assert got == {"full": full, "freeze": freeze, "scale-preserve": preserve, "scale-adapt": adapt,
                   "scale-route": preserve, "llama-pro": 2 * layer, "lora-r8": lora(8), "lora-r2": lora(2)}


def test_each_method_starts_from_a_base_at_the_base_function(results: dict[str, Any]) -> None:
    assert results["loads"] == {
        "full": ("base", True), "llama-pro": ("base+depth", True), "scale-preserve": ("base+upscale", True),
        "lora": ("base+lora", True),
    }

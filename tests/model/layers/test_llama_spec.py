"""The plain Llama block the non-SCALE methods train (full, freeze, llama-pro): megatron-core's
local layer with an RMSNorm that supports sequence parallelism.

One spawn, 2 ranks at TP=2:
  1. Without sequence parallelism it is megatron-core's local GPTModel, bitwise (same weights,
     same logits) and with the same checkpoint keys.
  2. With sequence parallelism the loss and every gradient equal those without (the norm gains'
     partial gradients all-reduced over TP, as finalize_model_grads does for `sequence_parallel`
     parameters).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks


def _build(cfg: Any, tied: bool, state: dict[str, torch.Tensor]) -> Any:
    from megatron_scale import _mcore as mc
    from megatron_scale.model.layers.spec import llama_block_spec
    from megatron_scale.model.weights.state import load_global_state_dict

    model = mc.GPTModel(cfg, llama_block_spec(cfg), vocab_size=_tiny.VOCAB, max_sequence_length=_tiny.SEQ,
                        share_embeddings_and_output_weights=tied, position_embedding_type="rope")
    load_global_state_dict(model, state)
    return model.to(_tiny.device())


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.weights.state import global_state_dict

    init_distributed(2, 1, device="cpu", seed=1234)
    out: dict[str, Any] = {}
    b = _tiny.batch(seed=5)
    for tied in (True, False):
        state = _tiny.base_state_dict(tied=tied)
        stock = _tiny.build_base(_tiny.base_config(2), tied, state)
        ours = _build(_tiny.base_config(2), tied, state)
        with torch.no_grad():
            a = stock(b["input_ids"], b["position_ids"], b["attention_mask"])
            c = ours(b["input_ids"], b["position_ids"], b["attention_mask"])
        out[f"bitwise_tied={tied}"] = torch.equal(a, c)
        out[f"keys_tied={tied}"] = sorted(global_state_dict(stock)) == sorted(global_state_dict(ours))

    state = _tiny.base_state_dict(tied=True)
    g = torch.Generator().manual_seed(7)
    state = {k: v * (1 + 0.1 * torch.randn(v.shape, generator=g)) if "layernorm" in k else v for k, v in state.items()}
    runs = {}
    for sp in (False, True):
        model = _build(_tiny.base_config(2, sequence_parallel=sp), True, state)
        loss = model(b["input_ids"], b["position_ids"], b["attention_mask"], labels=b["labels"]).mean()
        loss.backward()
        grads = {}
        for n, p in model.named_parameters():
            if getattr(p, "sequence_parallel", False):
                torch.distributed.all_reduce(p.grad, group=mc.parallel_state.get_tensor_model_parallel_group())
            grads[n] = p.grad.clone()
        runs[sp] = (float(loss), grads, sum(getattr(p, "sequence_parallel", False) for p in model.parameters()))
    (l0, g0, _), (l1, g1, n_sp) = runs[False], runs[True]
    out["sp_loss"] = (l0, l1)
    out["sp_params"] = n_sp
    out["sp_max_grad_err"] = max(float((g0[k] - g1[k]).abs().max()) for k in g0)
    out["sp_same_params"] = sorted(g0) == sorted(g1)
    return out


@pytest.mark.dist
def test_llama_block_is_megatron_local_and_supports_sequence_parallel() -> None:
    for r in run_ranks(_body, 2):
        for k in ("bitwise_tied=True", "bitwise_tied=False", "keys_tied=True", "keys_tied=False", "sp_same_params"):
            assert r[k], k
        assert r["sp_params"] == 2 * _tiny.LAYERS + 1  # two norms per layer + the final norm
        l0, l1 = r["sp_loss"]
        assert abs(l0 - l1) < 1e-6, r["sp_loss"]
        assert r["sp_max_grad_err"] < 1e-6, r["sp_max_grad_err"]

"""Pipeline parallelism (PP=2, gloo, 2 ranks): a SCALE model split over two stages is the same
model. Losses computed through megatron-core's pipeline schedule (forward only) equal the base
model's bitwise at init for every variant, tied and untied embeddings (the last stage then holds
a frozen copy of E, keyed to the embedding in checkpoints); the global state gathered from the
two stages equals the upscaled state that was loaded; and the frozen-base digest equals the
digest of the same model unsplit (PP=1)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks


def _losses(model: Any, b: dict) -> list[torch.Tensor]:
    from megatron_scale import _mcore as mc

    def step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        out = m(x["input_ids"], x["position_ids"], x["attention_mask"], labels=x["labels"])
        return out, lambda o: (o.float().mean(), {"per_token": o.detach().clone()})

    out = mc.get_forward_backward_func()(
        forward_step_func=step, data_iterator=iter([b]), model=[model], num_microbatches=1,
        seq_length=_tiny.SEQ, micro_batch_size=_tiny.BATCH, forward_only=True,
    )
    return [o["per_token"] for o in out]


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.distributed import init_distributed
    from megatron_scale.checkpoint.digest import frozen_base_digest
    from megatron_scale.model.weights.state import global_state_dict
    from megatron_scale.upscale import upscale_state_dict

    res: dict[str, Any] = {}
    init_distributed(1, 2, device="cpu", seed=1234)
    b = _tiny.batch(seed=4)
    for tied in (True, False):
        state = _tiny.base_state_dict(tied)
        cfg = _tiny.base_config(1, 2, pipeline_dtype=torch.float32)
        pre, post = mc.parallel_state.is_pipeline_first_stage(), mc.parallel_state.is_pipeline_last_stage()
        base = _tiny.build_base(cfg, tied, state, pre_process=pre, post_process=post).eval()
        ref = _losses(base, b)
        for variant in ("preserve", "adapt", "route"):
            sc = ScaleConfig(variant=variant)
            model = _tiny.build_scale(cfg, sc, tied, state, pre_process=pre, post_process=post).eval()
            got = _losses(model, b)
            res[f"{variant}/tied={tied}/stage_layers"] = len(model.decoder.layers)
            res[f"{variant}/tied={tied}/losses"] = len(got) == len(ref) and all(
                torch.equal(x, y) for x, y in zip(got, ref, strict=True)
            )
            res[f"{variant}/tied={tied}/n_losses"] = len(got)
            gathered = global_state_dict(model)
            full = upscale_state_dict(state, model.scale_dims)
            res[f"{variant}/tied={tied}/state"] = sorted(gathered) == sorted(full) and all(
                torch.equal(gathered[k], full[k]) for k in full
            )
            res[f"{variant}/tied={tied}/digest"] = frozen_base_digest(model)
    # The same models unsplit (PP=1; the two ranks become data-parallel replicas).
    mc.parallel_state.destroy_model_parallel()
    mc.parallel_state.initialize_model_parallel(1, 1)
    for tied in (True, False):
        state = _tiny.base_state_dict(tied)
        model = _tiny.build_scale(_tiny.base_config(1), ScaleConfig(), tied, state)
        res[f"unsplit/tied={tied}/digest"] = frozen_base_digest(model)
    return res


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_ranks(_body, 2)


@pytest.mark.dist
def test_pipeline_stages_preserve_and_hold_the_whole_model(results: list) -> None:
    first, last = results
    for key, ok in first.items():
        if key.endswith(("/losses", "/state")):
            assert ok, key
            assert last[key], key
        if key.endswith("/stage_layers"):
            assert ok == _tiny.LAYERS // 2 and last[key] == _tiny.LAYERS // 2
        if key.endswith("/n_losses"):
            assert last[key] == 1, "the last stage computes the loss"
        if key.endswith("/digest"):
            tied = key.split("/")[1]
            assert first[key] == last[key] == first[f"unsplit/{tied}/digest"], key
    assert sum(k.endswith("/losses") for k in first) == 6

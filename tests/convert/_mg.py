"""Megatron-side helpers for conversion tests (call inside spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch


def _gather_vocab(logits: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    from megatron_scale import _mcore as mc

    tp = mc.parallel_state.get_tensor_model_parallel_world_size()
    if tp == 1:
        return logits
    parts = [torch.empty_like(logits) for _ in range(tp)]
    dist.all_gather(parts, logits.contiguous(), group=mc.parallel_state.get_tensor_model_parallel_group())
    return torch.cat(parts, dim=-1)


def megatron_logits(model: Any, ids: torch.Tensor, route_labels: torch.Tensor | None = None) -> torch.Tensor | None:
    """Full [b, s, V] logits on the last pipeline stage (None elsewhere), at any TP/PP
    (`route_labels`: the tokens predicted, for a router deciding per character or word)."""
    from megatron_scale import _mcore as mc

    from megatron_scale.model.inputs import causal_mask, position_ids

    b, s = ids.shape
    device = next(model.parameters()).device
    batch = {"ids": ids.to(device), "pos": position_ids(b, s, device), "mask": causal_mask(s, device)}

    def step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        extra = {} if route_labels is None else {"route_labels": route_labels.to(device)}
        out = m(x["ids"], x["pos"], x["mask"], **extra)
        return out, lambda o: (o.float().sum() * 0, {"logits": o.detach().clone()})

    with torch.no_grad():
        out = mc.get_forward_backward_func()(
            forward_step_func=step, data_iterator=iter([batch]), model=[model], num_microbatches=1,
            seq_length=s, micro_batch_size=b, forward_only=True,
        )
    if not mc.parallel_state.is_pipeline_last_stage():
        return None
    return _gather_vocab(out[0]["logits"])


def greedy(model: Any, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding by full recomputation (no KV cache): the reference for generate()."""
    for _ in range(steps):
        logits = megatron_logits(model, ids)
        ids = torch.cat((ids, logits[:, -1].argmax(-1, keepdim=True).to(ids.device)), dim=1)
    return ids

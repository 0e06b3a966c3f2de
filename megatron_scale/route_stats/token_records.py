"""What one forward pass of a SCALE-Route model tells about every threshold: per token, the router
statistics, and the loss and top-1 correctness under each head.

    record = token_records(z_p, z_a, labels, group, statistics=("cosine", "max-prob"))
    record["loss_p"], record["loss_a"]        cross-entropy of the label under z_p, under z_a
    record["correct_p"], record["correct_a"]  the label is the head's top token
    record["stat/cosine"], ...                 router statistics (statistics.py)

Routing at (statistic, tau) emits z_p exactly where stat >= tau, so the routed loss of a token is
loss_p there and loss_a elsewhere: the records give the routed perplexity or accuracy at every tau
without another pass (sweep code: megatron_scale/route_eval/).
Vocab-parallel: z_p, z_a are this rank's [..., V/tp] slices. The losses are megatron-core's
vocab_parallel_cross_entropy (the function GPTModel's loss uses, so a routed evaluation and the
records agree to the bit); correctness compares the label's logit with the global maximum (one
all-reduce MAX and one SUM); the statistics all-reduce partial sums. Nothing gathers logits.
A label tied with another token at the maximum counts as correct (argmax would pick the lower id).
In a process with no model-parallel state (logits scored whole, outside a run) the loss is torch's
cross entropy instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale.route_stats.statistics import router_statistic, tp_all_reduce


def _label_logit(z: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """z[..., label] for vocab-parallel z: the owning rank contributes it, the others 0."""
    local = z.shape[-1]
    rank = dist.get_rank(group) if group is not None else 0
    start = rank * local
    inside = (labels >= start) & (labels < start + local)
    idx = (labels - start).masked_fill(~inside, 0)
    picked = z.float().gather(-1, idx.unsqueeze(-1)).squeeze(-1).masked_fill(~inside, 0.0)
    return tp_all_reduce(picked, group)


def _correct(z: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    top = tp_all_reduce(z.float().max(-1).values, group, dist.ReduceOp.MAX)
    return _label_logit(z, labels, group) >= top


def _loss(z: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    if group is None and not mc.parallel_state.model_parallel_is_initialized():
        # no process group at all (a single process scoring logits it holds whole): torch's own
        return torch.nn.functional.cross_entropy(z.float().reshape(-1, z.shape[-1]), labels.reshape(-1),
                                                 reduction="none").reshape(labels.shape)
    # clone: megatron-core's cross entropy works in place on fp32 logits
    return mc.tensor_parallel.vocab_parallel_cross_entropy(z.clone(), labels, tp_group=group).float()


def label_scores(z: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy of the label, whether the label is the top token) per token of vocab-parallel
    logits z [..., V/tp] whose leading dims are `labels`' (the records' loss_* and correct_*)."""
    g = group if group is not None and dist.get_world_size(group) > 1 else None
    with torch.no_grad():
        return _loss(z, labels, g), _correct(z, labels, g)


def token_records(
    z_p: torch.Tensor, z_a: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup | None = None,
    statistics: Sequence[str] = ("cosine",),
) -> dict[str, torch.Tensor]:
    """Per-token records (fp32 / bool, shape of `labels`) of logits [..., V/tp] whose leading
    dims are `labels`' (transpose megatron-core's [s, b, V] first)."""
    if z_p.shape != z_a.shape or z_p.shape[:-1] != labels.shape:
        raise ValueError(f"token_records: logits {tuple(z_p.shape)} / {tuple(z_a.shape)} do not match labels "
                         f"{tuple(labels.shape)}")
    g = group if group is not None and dist.get_world_size(group) > 1 else None
    with torch.no_grad():
        out = {
            "loss_p": _loss(z_p, labels, g), "loss_a": _loss(z_a, labels, g),
            "correct_p": _correct(z_p, labels, g), "correct_a": _correct(z_a, labels, g),
        }
        for name in statistics:
            out[f"stat/{name}"] = router_statistic(name, z_p, z_a, g)
    return out

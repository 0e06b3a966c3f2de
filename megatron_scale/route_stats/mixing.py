"""Controls for SCALE-Route's router: z_p and z_a combined with no statistic at all, so that a
router's trade-off can be compared with what needs no router (issue 44).

    alpha_mix(z_p, z_a, alpha)    z_p + alpha (z_a - z_p) = z_p + alpha W_out_up h_up: one global
                                  weight on the new output columns for every token (alpha 0: the
                                  base, 1: z_a); swept over alpha like a router over tau
    random_mix(z_p, z_a, rate)    each token independently takes z_a with probability `rate`,
                                  else z_p: routing by chance at the router's rate

A random mixture's expected loss and accuracy are linear in the rate, (1 - rate) of z_p's plus
rate of z_a's, so a sweep needs only the records' loss_p/loss_a and correct_p/correct_a
(route_eval/controls.py); the alpha mixture is not linear, so `mixing_records` scores each alpha
of a grid from the logits in the same pass as token_records (keys "alpha/<a>/loss" and
"alpha/<a>/correct"). Vocab-parallel like token_records: nothing gathers the logits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from megatron_scale.route_stats.token_records import label_scores

ALPHAS = tuple(round(0.05 * i, 2) for i in range(21))  # 0, 0.05, ..., 1


def alpha_key(alpha: float, what: str) -> str:
    """The record key of one alpha's per-token loss ("loss") or correctness ("correct")."""
    return f"alpha/{alpha:g}/{what}"


def alpha_mix(z_p: torch.Tensor, z_a: torch.Tensor, alpha: float) -> torch.Tensor:
    """z_p + alpha (z_a - z_p) (in z_p's dtype): the new columns' term scaled by one global weight."""
    if z_p.shape != z_a.shape:
        raise ValueError(f"alpha_mix: logits {tuple(z_p.shape)} and {tuple(z_a.shape)} differ in shape")
    return z_p + alpha * (z_a - z_p)


def random_mix(z_p: torch.Tensor, z_a: torch.Tensor, rate: float,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mixed logits, mask of tokens that took z_a): each token of [..., V] logits takes z_a with
    probability `rate`, drawn from `generator` (on the CPU, so any device draws the same mask)."""
    if z_p.shape != z_a.shape:
        raise ValueError(f"random_mix: logits {tuple(z_p.shape)} and {tuple(z_a.shape)} differ in shape")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"random_mix: the rate must lie in [0, 1], got {rate!r}")
    to_a = (torch.rand(z_p.shape[:-1], generator=generator) < rate).to(z_p.device)
    return torch.where(to_a.unsqueeze(-1), z_a, z_p), to_a


def mixing_records(z_p: torch.Tensor, z_a: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup | None = None,
                   alphas: Sequence[float] = ALPHAS) -> dict[str, torch.Tensor]:
    """Per token, for each alpha: the label's loss and whether it is the top token under
    alpha_mix(z_p, z_a, alpha) (fp32 / bool, shape of `labels`)."""
    if z_p.shape != z_a.shape or z_p.shape[:-1] != labels.shape:
        raise ValueError(f"mixing_records: logits {tuple(z_p.shape)} / {tuple(z_a.shape)} do not match labels "
                         f"{tuple(labels.shape)}")
    out = {}
    with torch.no_grad():
        p, a = z_p.float(), z_a.float()
        for alpha in alphas:
            loss, correct = label_scores(alpha_mix(p, a, float(alpha)), labels, group)
            out[alpha_key(alpha, "loss")], out[alpha_key(alpha, "correct")] = loss, correct
    return out

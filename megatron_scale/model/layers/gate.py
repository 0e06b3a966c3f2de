"""Training through a gate (issue 45): the new term of SCALE's logits, weighted per token by a
statistic of the preservation head alone.

    z_a = z_p + g * W_out_up h_up      g = sigmoid((tau - s(z_p)) / T)   (direction above)
                                       g = sigmoid((s(z_p) - tau) / T)   (direction below)

s is max-prob or certainty of softmax(z_p) (route_stats/statistics.py, the routers' own): the
base model's confidence, which needs no parameter and no later token. Where the base is sure (an
old-domain token, direction above) g is near 0 and the output is z_p's, so W_out_up and the
expansion get almost no gradient there; where it is unsure they learn, and are used. Training,
evaluation, SCALE-Route (which routes between z_p and this z_a) and the Hugging Face export all
use the same gate. g is computed without a gradient: the base is frozen, so z_p has none, and the
gradient reaches only W_out_up and, through h_up, the expansion.

With g = 1 exactly (tau far past every s, as tau = 2 with max-prob at T = 1e-3: sigmoid(1000) is
1.0 in fp32) the output is SCALE-Preserve's bit for bit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from megatron_scale.route_stats.statistics import router_statistic
from megatron_scale.scale_config import Gate


def gate(z_p: torch.Tensor, g: Gate, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """[..., 1] the gate `g` of each token of z_p ([..., V_local], vocab-parallel over `group`), in
    z_p's dtype; no gradient."""
    with torch.no_grad():
        s = router_statistic(g.statistic, z_p, z_p, group)
        x = g.tau - s if g.direction == "above" else s - g.tau
        return torch.sigmoid(x / g.temperature).to(z_p.dtype).unsqueeze(-1)

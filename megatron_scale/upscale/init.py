"""How the new rows [W21 W22] of one upscaled linear start. W12 always starts at exactly zero.

    svd     W21 = the top right-singular directions of W, one per new row (cycling when there are
            more new rows than directions), each scaled to the RMS row norm of W, ||W||_F / sqrt(m):
            new features start as the base's dominant input directions at the base's scale.
            W22 ~ N(0, std^2), which breaks the symmetry between rows that share a direction.
    normal  [W21 W22] ~ N(0, std^2)
    zero    [W21 W22] = 0
The paper recommends SVD initialisation; the exact scaling is this project's decision
(scale-method.md). Deterministic for a given torch.Generator state.
"""

from __future__ import annotations

import torch


def svd_rows(w: torch.Tensor, count: int) -> torch.Tensor:
    """[count, n]: top right-singular directions of w [m, n], scaled to w's RMS row norm."""
    w32 = w.detach().float()
    _, _, vh = torch.linalg.svd(w32, full_matrices=False)
    take = torch.arange(count) % vh.shape[0]
    scale = torch.linalg.matrix_norm(w32) / w32.shape[0] ** 0.5
    return vh[take] * scale


def new_rows(
    w: torch.Tensor, count: int, in_up: int, init: str, std: float, generator: torch.Generator
) -> torch.Tensor:
    """[count, n + n'] initial [W21 W22] for base block w [m, n], in w's dtype."""
    n = w.shape[1]
    if init == "zero":
        return torch.zeros(count, n + in_up, dtype=w.dtype)
    if init == "normal":
        return (torch.randn(count, n + in_up, generator=generator) * std).to(w.dtype)
    if init == "svd":
        w22 = torch.randn(count, in_up, generator=generator) * std
        return torch.cat((svd_rows(w, count), w22), dim=1).to(w.dtype)
    raise ValueError(f"unknown init {init!r}")

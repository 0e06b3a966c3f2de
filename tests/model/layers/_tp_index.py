"""Global <-> local for the dense-reference harness (_dense_reference.py): which rows and features of
a global (unsharded) tensor each TP rank holds, written from the method's description
(scale-method.md), not from partition.py."""

from __future__ import annotations

import torch


def column_rows(size: int, chunks: int, tp: int, r: int) -> torch.Tensor:
    """Global rows (of a block with `size` rows) that column-parallel rank r holds, in local
    order: piece r of tp of each of the `chunks` equal row-chunks."""
    c = size // chunks
    p = c // tp
    return torch.cat([torch.arange(j * c + r * p, j * c + (r + 1) * p) for j in range(chunks)])


def column_out_index(m: int, m_up: int, chunks: int, tp: int, r: int) -> torch.Tensor:
    """Index into the dense output [y; y_up] of each local output feature of rank r:
    [base chunk0_r, new chunk0_r, base chunk1_r, new chunk1_r, ...]."""
    base = column_rows(m, chunks, tp, r).chunk(chunks)
    new = column_rows(m_up, chunks, tp, r).chunk(chunks)
    return torch.cat([t for b, u in zip(base, new, strict=True) for t in (b, m + u)])


def row_in_index(n: int, n_up: int, tp: int, r: int) -> torch.Tensor:
    """Index into the dense input [x; x_up] of rank r's local input [x_r; x_up_r]."""
    pn, pu = n // tp, n_up // tp
    return torch.cat([torch.arange(r * pn, (r + 1) * pn), n + torch.arange(r * pu, (r + 1) * pu)])


def vocab_rows(vocab: int, tp: int, r: int) -> torch.Tensor:
    """The rows of every vocabulary-parallel table that rank r holds."""
    return torch.arange(r * vocab // tp, (r + 1) * vocab // tp)


def swiglu_global(w: torch.Tensor, tp: int) -> torch.Tensor:
    """A standalone linear_fc1's base `weight` is saved split plainly along rows, i.e. as the
    rank concatenation [gate_0; up_0; gate_1; up_1] (megatron-core applies its SwiGLU factory in
    MLP.sharded_state_dict, not in the linear). Reorder to the global [gate; up]."""
    blocks = w.chunk(2 * tp)
    return torch.cat([blocks[2 * r + j] for j in range(2) for r in range(tp)])

"""Log-likelihood of a continuation given its context, tokenized as lm-evaluation-harness does.

The harness (lm_eval.api.model.TemplateLM._encode_pair, causal models) moves the context's
trailing spaces onto the continuation, encodes context + continuation whole, and takes as the
continuation's tokens what follows the context's own encoding; an empty context is replaced by
the model's prefix token (EOS here, as the harness does without a BOS). The score is the sum of
log-softmax of the continuation's tokens, the sequence left-truncated to the model's window.

The model enters only as `logits(ids [b, s]) -> [b, s, V]`, so the same code scores a Hugging
Face folder and a megatron-core model. Sequences of a batch are right-padded: the model is
causal, so padding after a sequence cannot change its logits; equal inputs are run once (choices
that are one token each, after one shared context, need a single row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Logits = Callable[[torch.Tensor], torch.Tensor]
"""ids [b, s] (int64) -> logits [b, s, V] (any float dtype)."""


def encode_pair(encode: Callable[[str], list[int]], context: str, continuation: str,
                prefix_id: int) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens) as the harness makes them for a causal model."""
    if context == "":
        cont = encode(continuation)
        return ([prefix_id], cont) if cont[0] != prefix_id else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole, ctx = encode(context + continuation), encode(context)
    return ctx, whole[len(ctx):]


def continuation_logprobs(logits: Logits, pairs: Sequence[tuple[list[int], list[int]]],
                          max_length: int, pad_id: int = 0) -> list[float]:
    """Summed log-probability of each pair's continuation tokens given its context tokens, in one
    right-padded batch; each sequence keeps its last max_length + 1 tokens (as the harness)."""
    rows: dict[tuple[int, ...], int] = {}  # equal inputs run once (MMLU's one-token answers share one)
    spans = []
    for ctx, cont in pairs:
        if not cont:
            raise ValueError("a continuation encodes to no tokens")
        full = (ctx + cont)[-(max_length + 1):]
        row = rows.setdefault(tuple(full[:-1]), len(rows))
        spans.append((row, len(full) - 1 - len(cont), cont))
    width = max(len(s) for s in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for s, i in rows.items():
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    with torch.no_grad():
        out = logits(ids)
    scores = []
    for i, start, cont in spans:  # log-softmax of the scored positions only (V is large)
        logp = torch.log_softmax(out[i, start:start + len(cont)].float(), dim=-1)
        target = torch.tensor(cont, dtype=torch.long, device=logp.device)[:, None]
        scores.append(float(logp.gather(-1, target).sum()))
    return scores

"""First-token accuracy of QA answers: the model reads "question + answer prefix" and its argmax
at the last prompt position is compared with the first token of the answer.

The target is taken from the tokenisation of the whole training text (prompt + answer), so it
is the token the model sees in training; the prompt must tokenise to a prefix of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from megatron_scale.bio.texts import QA
from megatron_scale.data.tokenizer import Tokenizer
from megatron_scale.model.layers.heads import output_layers
from megatron_scale.model.inputs import causal_mask, position_ids
from megatron_scale.route_stats.mixing import mixing_records
from megatron_scale.route_stats.token_records import token_records
from megatron_scale.route_stats.statistics import STATISTICS
from megatron_scale.evaluation.capture import capturing
from megatron_scale.route_eval.curves import metric_at
from megatron_scale.scale_config import Router


@dataclass(frozen=True)
class Probe:
    prompt: tuple[int, ...]
    target: int
    attribute: str


def probes(tokenizer: Tokenizer, qas: Sequence[QA]) -> list[Probe]:
    out = []
    for qa in qas:
        prompt, full = tokenizer.encode(qa.prompt), tokenizer.encode(qa.text)
        if full[: len(prompt)] != prompt or len(full) <= len(prompt):
            raise ValueError(f"the prompt of {qa.text!r} does not tokenise to a prefix of the whole text")
        out.append(Probe(tuple(prompt), full[len(prompt)], qa.attribute))
    return out


TAUS = (-1.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.01)


def predictions(model: Any, items: Sequence[Probe], batch_size: int = 64) -> list[int]:
    """The model's argmax next token after each prompt (eval mode: a Route model routes)."""
    return answer_logits(model, items, batch_size).argmax(-1).cpu().tolist() if items else []


def _prompt_batches(model: Any, items: Sequence[Probe], batch_size: int) -> Iterator[tuple[Sequence[Probe], tuple, tuple]]:
    """(chunk, model inputs, index of each prompt's last position in [b, s, ...] outputs) per batch,
    on the model's device. Prompts are right-padded and collated on the host, then moved once;
    causal attention keeps the padding out of the positions read."""
    device = next(model.parameters()).device
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        width = max(len(p.prompt) for p in chunk)
        tokens = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, p in enumerate(chunk):
            tokens[i, : len(p.prompt)] = torch.tensor(p.prompt)
        last = torch.tensor([len(p.prompt) - 1 for p in chunk], device=device)
        rows = torch.arange(len(chunk), device=device)
        inputs = (tokens.to(device), position_ids(len(chunk), width, device), causal_mask(width, device))
        yield chunk, inputs, (rows, last)


def first_token_accuracy(model: Any, items: Sequence[Probe], batch_size: int = 64) -> dict[str, Any]:
    """{"accuracy", "per_attribute", and for a Route model "preserve_fraction" (share of the
    evaluated tokens the router sent to the preservation head)}."""
    heads = [h for h in output_layers(model) if h.routed]
    for h in heads:
        h.reset_route_counts()
    pred = predictions(model, items, batch_size)
    hits = [int(p == it.target) for p, it in zip(pred, items, strict=True)]
    per: dict[str, list[int]] = {}
    for h, it in zip(hits, items, strict=True):
        per.setdefault(it.attribute, []).append(h)
    result: dict[str, Any] = {
        "accuracy": sum(hits) / max(len(hits), 1),
        "per_attribute": {a: sum(v) / len(v) for a, v in per.items()},
    }
    if heads:
        result["preserve_fraction"] = heads[0].preserve_fraction
        result.update(route_diagnostics(model, items, heads[0].router, batch_size))
    if output_layers(model):
        result["expansion"] = expansion_effect(model, items, batch_size)
    return result


def expansion_effect(model: Any, items: Sequence[Probe], batch_size: int = 64) -> dict[str, float]:
    """What the new output columns add at the answer position, z_a - z_p = W_out_up h_up: in a
    Preserve (or Route) model the base's hidden states are untouched, so this term is the only way
    its predictions on the old task can change. Means over the probes of: its norm relative to
    z_p's, KL(softmax z_p || softmax z_a) in nats, and the share of probes whose argmax it changes
    (world size 1: the logits are whole on this rank)."""
    was_training = model.training
    model.eval()
    rel, kl, changed = [], [], []
    try:
        with torch.no_grad(), capturing(model) as layer:
            for _chunk, inputs, (rows, last) in _prompt_batches(model, items, batch_size):
                model(*inputs)
                z_p, z_a = (z[last, rows].double() for z in layer.captured)  # [b, V]
                rel.append((z_a - z_p).norm(dim=-1) / z_p.norm(dim=-1).clamp_min(1e-30))
                logp, loga = torch.log_softmax(z_p, -1), torch.log_softmax(z_a, -1)
                kl.append((logp.exp() * (logp - loga)).sum(-1))
                changed.append((z_a.argmax(-1) != z_p.argmax(-1)).double())
    finally:
        model.train(was_training)
    return {"relative_norm": float(torch.cat(rel).mean()), "kl_p_to_a": float(torch.cat(kl).mean()),
            "argmax_changed": float(torch.cat(changed).mean())}


def head_logits(model: Any, items: Sequence[Probe], batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """A SCALE model's two heads at each prompt's last position, (z_p, z_a) [len(items), V] on the
    model's device, from one pass (world size 1: the logits are whole on this rank)."""
    was_training = model.training
    model.eval()
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    try:
        with torch.no_grad(), capturing(model) as layer:
            for _, inputs, (rows, last) in _prompt_batches(model, items, batch_size):
                model(*inputs)
                z_p, z_a = layer.captured  # [s, b, V]
                parts.append((z_p[last, rows].float(), z_a[last, rows].float()))
    finally:
        model.train(was_training)
    return torch.cat([p for p, _ in parts]), torch.cat([a for _, a in parts])


def answer_logits(model: Any, items: Sequence[Probe], batch_size: int = 64) -> torch.Tensor:
    """The model's output logits at each prompt's last position, [len(items), V] (eval mode)."""
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            for _, inputs, at_last in _prompt_batches(model, items, batch_size):
                out.append(model(*inputs)[at_last].float())
    finally:
        model.train(was_training)
    return torch.cat(out)


def records_of(z_p: torch.Tensor, z_a: torch.Tensor, items: Sequence[Probe],
               statistics: Sequence[str] = STATISTICS) -> dict[str, torch.Tensor]:
    """Per-probe records (route_stats/token_records.py) of two logit sets [len(items), V]: the
    router statistics, each head's loss and correctness on the answer's first token, and at every
    alpha of route_stats/mixing.py's grid (the global-weight control) the correctness alone (the
    benchmark scores accuracy), on the CPU."""
    target = torch.tensor([p.target for p in items], device=z_p.device)
    rec = token_records(z_p, z_a, target, None, statistics)
    rec.update({k: v for k, v in mixing_records(z_p, z_a, target).items() if k.endswith("/correct")})
    return {k: v.cpu() for k, v in rec.items()}


def answer_records(model: Any, items: Sequence[Probe], batch_size: int = 64) -> dict[str, torch.Tensor]:
    """Per-probe records of a SCALE model's two heads at each prompt's last position (records_of)."""
    z_p, z_a = head_logits(model, items, batch_size)
    return records_of(z_p, z_a, items)


def baseline_records(base: torch.Tensor, model: Any, items: Sequence[Probe], batch_size: int = 64) -> dict[str, torch.Tensor]:
    """records_of with the base model's logits `base` (answer_logits of the task-0 model) as z_p
    and this model's as z_a: a router between a base and a fine-tuned model, SCALE-Route's
    control (z_p's own statistics, max-prob and certainty, read the base alone, as Route's do)."""
    return records_of(base, answer_logits(model, items, batch_size).to(base.device), items)


def json_records(records: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """Records as JSON lists (6 decimals)."""
    return {k: [round(float(v), 6) for v in t.tolist()] for k, t in records.items()}


def route_diagnostics(model: Any, items: Sequence[Probe], router: Router, batch_size: int = 64) -> dict[str, Any]:
    """For a Route model, at the answer position: the accuracy of z_p alone and of z_a alone,
    the share of prompts whose answer token has the model's router statistic >= its tau (the
    paper's direction, whatever the router's), the routed accuracy at other cosine thresholds, and the per-probe records of every
    statistic (the router has no parameters and training uses z_a's loss only, so one trained
    model gives every tau's accuracy)."""
    rec = answer_records(model, items, batch_size)
    cos = rec["stat/cosine"].double()
    return {
        "preserve_head_accuracy": float(rec["correct_p"].double().mean()),
        "adapt_head_accuracy": float(rec["correct_a"].double().mean()),
        "answer_preserve_fraction": float((rec[f"stat/{router.statistic}"] >= router.tau).double().mean()),
        "answer_cos_quantiles": [float(q) for q in torch.quantile(cos, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=cos.dtype))],
        "tau_sweep": {str(t): metric_at(rec, "cosine", t, "accuracy") for t in TAUS},
        "records": json_records(rec),
    }

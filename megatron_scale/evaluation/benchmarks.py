"""Score a model on multiple-choice benchmarks offline: per-task acc and acc_norm with standard
errors (scoring.py), from the items tasks.py reads, with the log-likelihoods loglik.py computes.

`evaluate` takes the model as a logits function and a tokenizer's encode, so a Hugging Face folder
(`hf_scorer`) and a megatron-core model score the same way. The record keeps every document's
choices (`per_item`), so two models (the HF export and the Megatron checkpoint of one model, or a
model before and after training) can be compared item by item.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megatron_scale.durable import atomic_write
from megatron_scale.evaluation.loglik import Logits, continuation_logprobs, encode_pair
from megatron_scale.evaluation.scoring import chance, item_scores, macro_f1, mean_stderr
from megatron_scale.evaluation.tasks import TASKS, Item, load_task, subset


@dataclass(frozen=True, kw_only=True)
class Scorer:
    """What evaluate needs of a model."""

    logits: Logits
    """ids [b, s] -> logits [b, s, V]."""
    encode: Callable[[str], list[int]]
    """The tokenizer's encode (special tokens as its default adds them, as the harness does)."""
    prefix_id: int
    """The token an empty context becomes (the harness's prefix_token_id: BOS, else EOS)."""
    max_length: int
    """The model's context window in tokens."""
    decode: Callable[[list[int]], str] | None = None
    """The tokenizer's decode (for bits per byte of held-out text; not needed for the benchmarks)."""


def hf_scorer(folder: str | os.PathLike, dtype: str = "float32", threads: int | None = None,
              device: str = "cpu") -> Scorer:
    """A Hugging Face folder (SCALE exports load with trust_remote_code) on `device`; the token
    batches, made on the host, move there once per forward."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(folder)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"--model {path}: not a Hugging Face model folder (no config.json)")
    if threads:
        torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    window = int(getattr(model.config, "max_position_embeddings", 2048))
    return Scorer(logits=lambda ids: model(input_ids=ids.to(model.device)).logits, encode=tok.encode,
                  prefix_id=int(prefix), max_length=window, decode=tok.decode)


def score_items(scorer: Scorer, items: Sequence[Item], batch_tokens: int = 4096,
                progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Every item's log-likelihoods, acc, acc_norm and predictions; documents are batched whole
    until a batch holds about batch_tokens tokens (sorted by length: less padding)."""
    pairs = [[encode_pair(scorer.encode, c, k, scorer.prefix_id) for c, k in zip(it.contexts, it.continuations)]
             for it in items]
    size = [sum(len(a) + len(b) for a, b in p) for p in pairs]
    order = sorted(range(len(items)), key=lambda i: -size[i])
    lls: dict[int, list[float]] = {}
    batch: list[int] = []
    for n, i in enumerate(order):
        batch.append(i)
        last = n == len(order) - 1
        if last or sum(len(pairs[j]) for j in batch) * max(size[j] for j in batch) >= batch_tokens:
            flat = continuation_logprobs(scorer.logits, [p for j in batch for p in pairs[j]], scorer.max_length)
            for j in batch:
                lls[j], flat = flat[:len(pairs[j])], flat[len(pairs[j]):]
            if progress:
                progress(len(lls))
            batch = []
    out = []
    for i, it in enumerate(items):
        s = item_scores(lls[i], it.continuations, it.gold)
        out.append({"doc_id": it.doc_id, "gold": it.gold, "lls": lls[i], **s})
    return out


def evaluate(scorer: Scorer, tasks: Sequence[str], *, limit: int | None = None, seed: int = 1234,
             variants: dict[str, str] | None = None, batch_tokens: int = 4096,
             say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """{task: acc, acc_stderr, acc_norm, acc_norm_stderr, [f1,] chance, n, n_total, source..., per_item}
    for each task (f1: macro F1 over the labels, where the task reports it, as KoBEST's do)."""
    results: dict[str, Any] = {}
    for name in tasks:
        items, where = load_task(name, (variants or {}).get(name))
        chosen = subset(items, limit, seed)
        start = time.perf_counter()
        scored = score_items(scorer, chosen, batch_tokens)
        acc = mean_stderr([s["acc"] for s in scored])
        row: dict[str, Any] = {"acc": acc[0], "acc_stderr": acc[1]}
        if where.pop("acc_norm", TASKS[name].norm):  # a task whose prompt form decides it says so
            norm = mean_stderr([s["acc_norm"] for s in scored])
            row.update(acc_norm=norm[0], acc_norm_stderr=norm[1])
        if where.pop("f1", False):
            row["f1"] = macro_f1([s["gold"] for s in scored], [s["pred"] for s in scored])
        row["chance"] = chance([len(it.continuations) for it in chosen])
        row.update(n=len(chosen), n_total=len(items), seed=seed, **where,
                   seconds=round(time.perf_counter() - start, 1), per_item=scored)
        results[name] = row
        say(f"{name}: " + table_cells(row) + f" ({row['seconds']:.0f} s)")
    return results


def _pct(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return "-"
    err = row[f"{key}_stderr"]
    return f"{100 * row[key]:.1f} ± {100 * err:.1f}" if not math.isnan(err) else f"{100 * row[key]:.1f}"


def _plain(row: dict[str, Any], key: str) -> str:
    return f"{100 * row[key]:.1f}" if key in row else "-"


def table_cells(row: dict[str, Any]) -> str:
    return (f"acc {_pct(row, 'acc')} | acc_norm {_pct(row, 'acc_norm')} | chance {_plain(row, 'chance')} "
            f"| n {row['n']}/{row['n_total']}")


def table(results: dict[str, Any]) -> str:
    """A Markdown table of the results (percent, ± one standard error; chance: a uniform guess's accuracy)."""
    lines = ["| task | shots | split | n | chance (%) | acc (%) | acc_norm (%) | macro F1 (%) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['num_fewshot']} | {r['split']} | {r['n']}/{r['n_total']} | {_plain(r, 'chance')} "
                     f"| {_pct(r, 'acc')} | {_pct(r, 'acc_norm')} | {_plain(r, 'f1')} |")
    return "\n".join(lines)


def text_table(text: dict[str, Any]) -> str:
    """Perplexity beside bits per byte and per character, one row per held-out set."""
    lines = ["| held-out text | docs | tokens | bytes | chars | ppl (per token) | bits/byte | bits/char |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r['docs']} | {r['tokens']} | {r['bytes']} | {r['chars']} | {r['ppl']:.2f} "
              f"| {r['bits_per_byte']:.3f} | {r['bits_per_char']:.3f} |" for n, r in text.items()]
    return "\n".join(lines)


def write(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """The results JSON and, beside it, the tables (<path without .json>.md), each written atomically."""
    atomic_write(path, json.dumps(record, indent=1) + "\n")
    tables = [table(record["results"])] + ([text_table(record["text"])] if record.get("text") else [])
    atomic_write(Path(path).with_suffix(".md"), "\n\n".join(tables) + "\n")

"""Perplexity with bits per byte and per character (bpb.py) of a model on held-out text: the
demo's held-out sets (megatron_scale.data.demo: Shakespeare `en`, the Python Language Reference
`en-modern`, the SQuAD / CoQA / DROP / LAMBADA passages `en-passages` (data/passages.py), the
Korean bills and constitution `ko`, the Korean R&D manuals `ko-rnd`), for any tokenizer.

Each document is encoded alone, the model's prefix token (BOS, else EOS) put before it, and cut
into disjoint windows of `window` tokens: every document token is predicted exactly once, from
the tokens before it in its window. The loss is summed over documents until `max_tokens` scored
tokens (whole documents, in order), and bytes and characters are those of the scored tokens'
decoded text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from megatron_scale.evaluation.bpb import TextLoss
from megatron_scale.evaluation.loglik import Logits


def held_out_sets() -> dict[str, Callable[[], list[str]]]:
    """The demo's held-out documents by name (every 10th document, as prepare_demo splits them)."""
    from megatron_scale.data import demo

    from megatron_scale.data.passages import passage_documents

    return {"en": lambda: demo.split_held_out(list(demo.english_documents()), 10)[1],
            "en-modern": lambda: list(demo.modern_english_documents()),
            "en-passages": lambda: list(passage_documents()),
            "ko": lambda: demo.split_held_out(list(demo.korean_documents()), 10)[1],
            "ko-rnd": lambda: demo.split_held_out(list(demo.korean_regulation_documents()), 10)[1]}


def text_loss(logits: Logits, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
              docs: Sequence[str], *, prefix_id: int, window: int = 512, max_tokens: int | None = None
              ) -> dict[str, float]:
    """{docs, tokens, bytes, chars, loss, ppl, bits_per_byte, bits_per_char} over `docs`."""
    loss, n_docs = TextLoss(), 0
    for text in docs:
        ids = encode(text)
        ids = ids[1:] if ids and ids[0] == prefix_id else ids  # a tokenizer that adds BOS itself
        if not ids:
            continue
        seq = [prefix_id, *ids]
        for s in range(0, len(ids), window):
            target = seq[s + 1:s + window + 1]
            inp = torch.tensor([seq[s:s + len(target)]], dtype=torch.long)
            with torch.no_grad():
                logp = torch.log_softmax(logits(inp)[0].float(), dim=-1)
            t = torch.tensor(target, dtype=torch.long, device=logp.device)[:, None]
            loss.add(-float(logp.gather(-1, t).sum()), target)
        n_docs += 1
        if max_tokens is not None and len(loss.ids) >= max_tokens:
            break
    return {"docs": n_docs, **loss.result(decode)}

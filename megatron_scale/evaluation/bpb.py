"""Bits per UTF-8 byte and per character: a language model's loss that compares across tokenizers
and languages, beside perplexity (which is per token, and so depends on how finely a tokenizer cuts).

For the scored tokens t_1..t_n of a text (every predicted token, in order) with summed negative
log-likelihood L (nats):

    perplexity      = exp(L / n)
    bits per byte   = L / (ln 2 * B)    B = len(decode(t_1..t_n).encode("utf-8"))
    bits per char   = L / (ln 2 * C)    C = len(decode(t_1..t_n)), Unicode code points

B and C count the text the scored tokens decode to, decoded as one stream: a byte-level tokenizer
(SmolLM2's, GPT-2's) spends several tokens on one Hangul syllable (3 UTF-8 bytes), and decoding
the tokens window by window or one by one would count a replacement character (3 bytes, 1 char)
for each broken piece instead. `TextLoss.add` therefore collects ids, and `result` decodes once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def bits_per_unit(nll_nats: float, units: int) -> float:
    """Summed loss in nats over a text, in bits per unit of that text (byte or character)."""
    if units <= 0:
        raise ValueError("bits per byte/char of an empty text")
    return nll_nats / (math.log(2) * units)


@dataclass(kw_only=True)
class TextLoss:
    """Loss of one evaluation set, gathered over windows: `add` each window's summed loss and its
    scored token ids (in text order), then `result(decode)`."""

    nll: float = 0.0
    """Summed negative log-likelihood so far (nats)."""
    ids: list[int] = field(default_factory=list)
    """Every scored token id so far, in order."""

    def add(self, nll: float, ids: Sequence[int]) -> None:
        self.nll += float(nll)
        self.ids.extend(int(i) for i in ids)

    def result(self, decode: Callable[[list[int]], str]) -> dict[str, float]:
        """{tokens, bytes, chars, loss (nats/token), ppl, bits_per_byte, bits_per_char}."""
        if not self.ids:
            raise ValueError("no scored tokens")
        text = decode(self.ids)
        n_bytes, n_chars = len(text.encode("utf-8")), len(text)
        return {"tokens": len(self.ids), "bytes": n_bytes, "chars": n_chars, "loss": self.nll / len(self.ids),
                "ppl": math.exp(self.nll / len(self.ids)), "bits_per_byte": bits_per_unit(self.nll, n_bytes),
                "bits_per_char": bits_per_unit(self.nll, n_chars)}

"""Script-scoped output rows (issue 45): only a new script's vocabulary rows of W_out_up train.

SCALE-Preserve's logits are z_a = z_p + W_out_up h_up, and W_out_up starts at zero. Trained on a
new language, every row of W_out_up moves, so the new term shifts old-language argmaxes too. With
the rows scoped to a script, the gradient of every other row is zero: those rows stay as they
were (zero from the upscaling), so on every token outside the script z_a's logit is z_p's, and an
old-language argmax can move only through the script's own logits (normalisation: a Hangul token
that outbids an English one).

Which rows: the tokens whose bytes can spell part of a character of the script, derived from the
byte-level tokenizer (data/tokenizer.py token_bytes), not from a hand list. A token's bytes split
into a leading run of UTF-8 continuation bytes (the end of a character begun before it), whole
characters, and a trailing lead byte with what follows (the start of a character ended after it).
The token is in the script's rows when a whole character is in the script, or when its leading
run ends, or its trailing part begins, some character of the script. A byte-level vocabulary's
single continuation bytes can end a Hangul syllable, so they are in; a Latin "é" (one whole
character) is not. Special tokens (no bytes) and padded rows are not.

`scope_output_rows` applies a [V] row mask to a built model's output layers: a gradient hook on each output
layer's weight_up keeps its slice of the vocabulary-parallel rows (rank r: [V/tp r, V/tp (r+1)))
and zeroes the rest. With every row in the mask the gradient is the unscoped one, bit for bit.
The forward is unchanged, so evaluation, checkpoints and the Hugging Face export need nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import torch

from megatron_scale.scale_checks import OUTPUT_ROWS

# Hangul Jamo, Hangul Compatibility Jamo, Jamo Extended-A, Hangul Syllables, Jamo Extended-B
HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7A3), (0xD7B0, 0xD7FF))
SCRIPTS: dict[str, tuple[tuple[int, int], ...]] = {"hangul": HANGUL}


def _check(script: str) -> tuple[tuple[int, int], ...]:
    if script not in SCRIPTS:
        choices = ", ".join(r for r in OUTPUT_ROWS if r != "all")
        raise ValueError(f"--scale-output-rows: unknown script {script!r}; choose one of {choices}")
    return SCRIPTS[script]


@cache
def _encodings(script: str) -> tuple[frozenset[bytes], frozenset[bytes], frozenset[bytes]]:
    """(whole characters, proper endings, proper beginnings) of the script's UTF-8 encodings."""
    whole, ends, begins = set(), set(), set()
    for lo, hi in _check(script):
        for cp in range(lo, hi + 1):
            b = chr(cp).encode("utf-8")
            whole.add(b)
            for k in range(1, len(b)):
                begins.add(b[:k])
                ends.add(b[k:])
    return frozenset(whole), frozenset(ends), frozenset(begins)


def _length(lead: int) -> int:
    """Bytes of the UTF-8 character a lead byte begins (1 for ASCII and for a stray byte)."""
    return 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1


def in_script(piece: bytes, script: str) -> bool:
    """Whether a token's bytes can spell part of a character of `script` (see the module's text)."""
    whole, ends, begins = _encodings(script)
    i = 0
    while i < len(piece) and piece[i] & 0xC0 == 0x80:
        i += 1
    if i and piece[:i] in ends:
        return True
    while i < len(piece):
        n = _length(piece[i])
        part = piece[i : i + n]
        if part in whole or (len(part) < n and part in begins):
            return True
        i += n
    return False


def script_rows(pieces: Sequence[bytes], vocab_size: int, script: str) -> torch.Tensor:
    """[vocab_size] bool: the rows of `script` for a byte-level vocabulary (`pieces`: token id ->
    bytes, b"" for special tokens); rows past the tokenizer's (a padded vocabulary) are not."""
    _check(script)
    if vocab_size < len(pieces):
        raise ValueError(f"the tokenizer has {len(pieces)} tokens, more than the model's vocabulary of {vocab_size}")
    rows = torch.zeros(vocab_size, dtype=torch.bool)
    rows[: len(pieces)] = torch.tensor([bool(p) and in_script(p, script) for p in pieces], dtype=torch.bool)
    return rows


def scope_output_rows(layers: Sequence[Any], rows: torch.Tensor) -> int:
    """Train only `rows` ([V] bool over the model's padded vocabulary) of W_out_up in each of the
    output layers `layers` (heads.py ScaleOutputLayer, heads.output_layers of a built model): a
    gradient hook zeroes the others (once per layer; a second call is refused). Returns how many
    rows train."""
    for layer in layers:
        if rows.numel() != layer.vocab_local * layer.tp_size:
            raise ValueError(f"--scale-output-rows: {rows.numel()} rows for a vocabulary of "
                             f"{layer.vocab_local * layer.tp_size}")
        if getattr(layer, "row_scope", None) is not None:
            raise ValueError("--scale-output-rows: the output rows are scoped already")
        local = rows[layer.vocab_start_index : layer.vocab_end_index].to(layer.weight_up.device)
        layer.row_scope = local
        keep = local.unsqueeze(-1)
        layer.weight_up.register_hook(lambda g, keep=keep: g.masked_fill(~keep, 0))
    return int(rows.sum())

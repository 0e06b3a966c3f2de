"""Greedy continuations of a few English and Korean prompts by every exported model: what
forgetting and learning look like, next to the perplexity table.

Each model is a Hugging Face folder (the recipe's exports; SCALE exports carry their own modeling
code, loaded with trust_remote_code, and route as their config.json says). Decoding is greedy, so
the text is a function of the weights and the prompt. Writes generations.json and generations.md
atomically. torch and transformers are imported when called: the recipe's launcher side stays
standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from megatron_scale import artifacts
from megatron_scale.durable import atomic_write

PROMPTS = {
    "en": ("The capital of France is", "In Python, a list is"),
    "ko": ("대한민국의 수도는", "국회는 법률을"),
}


def continuations(folder: str | os.PathLike, prompts: Sequence[str], new_tokens: int) -> list[str]:
    """The model's greedy continuation of each prompt (the new tokens only, decoded)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, trust_remote_code=True).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = []
    with torch.no_grad():
        for text in prompts:
            ids = tok(text, return_tensors="pt").input_ids
            got = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=pad)
            out.append(tok.decode(got[0, ids.shape[1]:], skip_special_tokens=True))
    return out


def write_samples(models: Mapping[str, str], out_dir: str | os.PathLike, *, new_tokens: int = 24,
                  prompts: Mapping[str, Sequence[str]] = PROMPTS) -> dict[str, Any]:
    """Every model's continuation of every prompt, as {model: {lang: [{prompt, text}]}}, also
    written to out_dir/generations.json and generations.md."""
    missing = [f"{name}={path}" for name, path in models.items() if not (Path(path) / "config.json").is_file()]
    if missing:
        raise FileNotFoundError(f"no Hugging Face model (config.json) at {', '.join(missing)}")
    results = {name: {lang: [{"prompt": p, "text": t} for p, t in zip(ps, continuations(path, ps, new_tokens))]
                      for lang, ps in prompts.items()}
               for name, path in models.items()}
    lines = [f"Greedy continuations ({new_tokens} new tokens) of each prompt, per model.", ""]
    for lang, ps in prompts.items():
        for i, p in enumerate(ps):
            lines += [f"**{lang}: {p}**", "", "| model | continuation |", "|---|---|"]
            for name in models:
                text = results[name][lang][i]["text"].replace("\n", " ").replace("|", "\\|").strip()
                lines.append(f"| {name} | {text} |")
            lines.append("")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / artifacts.GENERATIONS.name, json.dumps(results, ensure_ascii=False, indent=2) + "\n")
    atomic_write(out / artifacts.GENERATIONS_MD.name, "\n".join(lines))
    return results

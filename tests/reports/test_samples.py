"""tools/generate_samples.py (the recipe's last step): each model's greedy continuation of each
prompt, written as generations.json / generations.md; equal to a plain argmax decoding loop over
the model's own logits; a folder without a model is refused by name before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from megatron_scale.data.tokenizer import train_byte_bpe
from tests.convert._hf import make_hf

TEXTS = ["The capital of France is Paris.", "In Python, a list is a sequence.", "대한민국의 수도는 서울이다.",
         "국회는 법률을 제정한다."] * 20


def _argmax_decode(folder: Path, prompt: str, new_tokens: int) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    start = ids.shape[1]
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tok.decode(ids[0, start:], skip_special_tokens=True)


def test_generations_are_greedy_and_written_atomically(tmp_path: Path) -> None:
    from tests.demo.conftest import run_tool

    folders = {}
    for name, seed in (("base", 0), ("other", 1)):
        folder = tmp_path / name
        train_byte_bpe(TEXTS, 300, str(folder))
        make_hf(folder, tied=True, seed=seed, vocab_size=300)
        folders[name] = folder
    out = tmp_path / "report"
    got = run_tool("generate_samples", *(a for n, f in folders.items() for a in ("--model", f"{n}={f}")),
                   "--output", str(out), "--new-tokens", "6")
    assert list(got) == ["base", "other"] and list(got["base"]) == ["en", "ko"]
    for name, folder in folders.items():
        for lang in ("en", "ko"):
            for item in got[name][lang]:
                assert item["text"] == _argmax_decode(folder, item["prompt"], 6), (name, item)
    assert got["base"]["en"] != got["other"]["en"]  # two different random models, two texts
    assert json.loads((out / "generations.json").read_text(encoding="utf-8")) == got
    md = (out / "generations.md").read_text(encoding="utf-8")
    assert "**ko: 대한민국의 수도는**" in md and md.count("| base |") == 4
    assert not list(out.glob("*.partial"))


def test_a_folder_without_a_model_is_refused(tmp_path: Path) -> None:
    from megatron_scale.reports.samples import write_samples

    with pytest.raises(FileNotFoundError, match=r"no Hugging Face model \(config.json\) at full="):
        write_samples({"full": str(tmp_path / "missing")}, tmp_path / "out")
    assert not (tmp_path / "out").exists()

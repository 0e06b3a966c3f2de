"""The data command lines, as users run them: the one-command demo preparation, inspection, and
errors that name the flag and exit 2 before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / name), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_demo_data_in_one_command_then_inspect(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = _tool("prepare_demo_data.py", "--output-dir", str(out), "--vocab-size", "1024")
    assert r.returncode == 0, r.stderr
    flags = r.stdout.split()
    assert flags[:4] == ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(out / "tokenizer")]
    for name in ("en_train", "en_valid", "ko_train", "ko_valid", "en_modern_valid"):
        for ext in (".bin", ".idx"):
            assert (out / f"{name}_text_document{ext}").is_file()
    assert not [p for p in os.listdir(out) if "partial" in p]
    # every 10th document held out, in both languages
    n = {name: sum(1 for _ in open(out / f"{name}.jsonl", encoding="utf-8"))
         for name in ("en_train", "en_valid", "ko_train", "ko_valid")}
    assert n["en_valid"] == (n["en_train"] + n["en_valid"]) // 10 > 50
    assert n["ko_valid"] == (n["ko_train"] + n["ko_valid"]) // 10 > 10
    r = _tool("inspect_dataset.py", str(out / "ko_valid_text_document"), "--tokenizer-model", str(out / "tokenizer"),
              "--samples", "0", "--max-chars", "100000")
    assert r.returncode == 0, r.stderr
    assert f"documents                                 {n['ko_valid']}" in r.stdout
    first = json.loads(open(out / "ko_valid.jsonl", encoding="utf-8").readline())["text"]
    assert unicodedata.normalize("NFC", first) + "<|endoftext|>" in r.stdout


def test_demo_data_raw_only_writes_the_splits(tmp_path: Path) -> None:
    """--raw-only (the recipe's DEMO_CORPORA=1): the JSONL splits, for a base model's own tokenizer;
    no BPE, no datasets; the same documents as the full preparation writes. The modern English
    set is the Python Language Reference's running prose: no grammar rules or code lines."""
    out = tmp_path / "raw"
    r = _tool("prepare_demo_data.py", "--output-dir", str(out), "--raw-only")
    assert r.returncode == 0, r.stderr
    names = ("en_train", "en_valid", "ko_train", "ko_valid", "en_modern_valid")
    assert r.stdout.split() == [str(out / f"{n}.jsonl") for n in names]
    assert sorted(os.listdir(out)) == sorted(f"{n}.jsonl" for n in names)
    from megatron_scale.data.demo import korean_documents, split_held_out

    train, valid = split_held_out(list(korean_documents()), 10)
    got = [json.loads(line)["text"] for line in open(out / "ko_valid.jsonl", encoding="utf-8")]
    assert got == valid and sum(1 for _ in open(out / "ko_train.jsonl", encoding="utf-8")) == len(train)
    modern = [json.loads(line)["text"] for line in open(out / "en_modern_valid.jsonl", encoding="utf-8")]
    words = sum(len(d.split()) for d in modern)
    assert len(modern) > 50 and words > 30_000, (len(modern), words)
    paragraphs = [p for d in modern for p in d.split("\n\n")]
    assert not [p for p in paragraphs if "::=" in p or p.startswith((">>>", "*", " "))]
    assert any(p.startswith("Exceptions are a means of breaking out of the normal flow") for p in paragraphs)


def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path) -> None:
    r = _tool("preprocess_data.py", "--input", str(tmp_path / "nope.jsonl"), "--output-prefix", str(tmp_path / "o"),
              "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tmp_path))
    assert r.returncode == 2 and "--input" in r.stderr and "nope.jsonl: no such file" in r.stderr, r.stderr
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    r = _tool("preprocess_data.py", "--input", str(tmp_path / "a.jsonl"), "--output-prefix", str(tmp_path / "o"),
              "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tmp_path))
    assert r.returncode == 2 and "no tokenizer.json in the folder" in r.stderr, r.stderr
    r = _tool("inspect_dataset.py", str(tmp_path / "missing"))
    assert r.returncode == 2 and "missing.bin" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == ["a.jsonl"]  # nothing written by the failed runs


def _chat_tokenizer(folder: Path, document_end: str, chat_end: str) -> dict[str, int]:
    """A byte-level BPE with a document-end and a chat-end token, whose tokenizer_config.json names
    the chat end as eos_token (as SmolLM2-Instruct's and Llama 3 Instruct's do)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[chat_end, document_end], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["some text to learn from"] * 10, trainer=trainer)
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": chat_end}))
    return {t: tok.token_to_id(t) for t in (document_end, chat_end)}


def test_append_eod_ends_documents_with_the_document_end_token(tmp_path: Path) -> None:
    from megatron_scale import _mcore as mc

    (tmp_path / "a.jsonl").write_text('{"text": "some text"}\n{"text": "more text"}\n')
    for document_end, chat_end in (("<|endoftext|>", "<|im_end|>"), ("<|end_of_text|>", "<|eot_id|>")):
        folder = tmp_path / chat_end.strip("<|>")
        ids = _chat_tokenizer(folder, document_end, chat_end)
        assert ids[document_end] != ids[chat_end]
        for extra, want in (((), document_end), (("--eod-token", chat_end), chat_end)):
            out = tmp_path / f"{folder.name}{len(extra)}"
            r = _tool("preprocess_data.py", "--input", str(tmp_path / "a.jsonl"), "--output-prefix", str(out),
                      "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder), "--append-eod",
                      "--no-progress", *extra)
            assert r.returncode == 0, r.stderr
            assert f"every document ends with {want} (id {ids[want]})" in r.stdout, r.stdout
            ds = mc.IndexedDataset(f"{out}_text_document")
            assert [int(ds[i][-1]) for i in range(len(ds))] == [ids[want]] * 2
    r = _tool("preprocess_data.py", "--input", str(tmp_path / "a.jsonl"), "--output-prefix", str(tmp_path / "x"),
              "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder), "--append-eod",
              "--eod-token", "<|nope|>")
    assert r.returncode == 2 and "--eod-token '<|nope|>': not a token" in r.stderr, r.stderr

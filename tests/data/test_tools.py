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
    for name in ("en_train", "en_valid", "ko_train", "ko_valid"):
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

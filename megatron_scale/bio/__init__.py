"""The synthetic biography benchmark: SCALE's controlled forgetting experiment.

    people.py     seeded synthetic people (a name and six attributes)
    texts.py      biographies in several sentence templates, one question per attribute
    corpus.py     tokenizer and Megatron indexed datasets of those texts
    evaluate.py   first-token accuracy of QA answers
    protocol.py   pre-train -> task 0 (QA) -> per method task 1 (QA on unseen people)
Driven by tools/biography_benchmark.py; its results.json, tables and plot are
megatron_scale/reports/bio.py's, its frontier megatron_scale/reports/bio_frontier.py's.
"""

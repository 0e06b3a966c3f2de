"""The synthetic biography benchmark: SCALE's controlled forgetting experiment.

    people.py     seeded synthetic people (a name and six attributes)
    texts.py      biographies in several sentence templates, one question per attribute
    corpus.py     tokenizer and Megatron indexed datasets of those texts
    evaluate.py   first-token accuracy of QA answers
    protocol.py   pre-train -> task 0 (QA) -> per method task 1 (QA on unseen people)
    report.py     results.json, a Markdown table and a PNG plot
Driven by tools/biography_benchmark.py.
"""

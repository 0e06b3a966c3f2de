"""Bad input stops before any process group, with one message naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_scale.training.config import data_blend, eval_sets, parse
from megatron_scale.training.plan import plan
from tests.training._runs import MODEL, make_dataset


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_dataset(tmp_path_factory.mktemp("d") / "en", seed=0)


def _args(data: str, *extra: str) -> list[str]:
    return [*MODEL, "--train-iters", "4", "--data-path", data, *extra]


@pytest.mark.parametrize(
    ("extra", "world", "flag"),
    [
        (("--global-batch-size", "6"), 2, "--global-batch-size"),
        (("--tensor-model-parallel-size", "3"), 2, "--tensor-model-parallel-size"),
        (("--pipeline-model-parallel-size", "2", "--num-layers", "3"), 2, "--num-layers"),
        (("--sequence-parallel",), 1, "--sequence-parallel"),
        (("--load", "/nonexistent/ckpt"), 1, "--load"),
        (("--save-interval", "5"), 1, "--save-interval"),
        (("--method", "freeze", "--freeze-layers", "9"), 1, "--freeze-layers"),
        (("--method", "lora", "--lora-rank", "0"), 1, "--lora-rank"),
        (("--method", "lora", "--lora-alpha", "0"), 1, "--lora-alpha"),
        (("--method", "lora", "--lora-dropout", "1"), 1, "--lora-dropout"),
        (("--method", "lora", "--tensor-model-parallel-size", "2", "--sequence-parallel"), 2, "--sequence-parallel"),
        # alone, a g' completes h' at the GQA ratio (config.py); 3 groups over 2 ranks cannot work
        (("--scale-groups-up", "3", "--tensor-model-parallel-size", "2"), 2, "--scale-groups-up"),
        (("--eval-data-path", "en"), 1, "--eval-data-path"),
        (("--route-tau", "0.7"), 1, "--route-tau: only a --method scale-route model routes"),
        (("--method", "scale-route", "--route-tau", "nan"), 1, "--route-tau: tau must be a finite number"),
        (("--route-direction", "below"), 1, "--route-direction: only a --method scale-route model routes"),
        (("--route-unit", "char"), 1, "--route-unit: only a --method scale-route model routes"),
        (("--fp8-format", "hybrid"), 1, "--fp8-format needs --transformer-impl transformer_engine"),
        (("--fp8-recipe", "tensorwise"), 1, "--fp8-recipe needs --fp8-format"),
        (("--gradient-accumulation-fusion",), 1, "--gradient-accumulation-fusion needs --transformer-impl"),
        (("--transformer-impl", "transformer_engine", "--fp8-format", "hybrid"), 1, "--fp8-format needs --bf16"),
        (("--transformer-impl", "transformer_engine", "--method", "lora"), 1, "--method lora: not with --transformer-impl"),
        (("--transformer-impl", "transformer_engine", "--device", "cpu"), 1, "--transformer-impl transformer_engine needs --device cuda"),
        (("--transformer-impl", "transformer_engine"), 1, "--transformer-impl transformer_engine"),
        # what megatron-core would only assert on, mid-setup
        (("--lr-warmup-iters", "4"), 1, "--lr-warmup-iters 4 must be below --train-iters 4"),
        (("--lr-decay-iters", "2"), 1, "--lr-warmup-iters 2 must be below --lr-decay-iters 2"),
        (("--lr-decay-iters", "0"), 1, "--lr-decay-iters 0: must be at least 1"),
        (("--min-lr", "1"), 1, "--min-lr 1.0 is above --lr"),
        (("--decoupled-min-lr", "1e-4"), 1, "--decoupled-min-lr needs --decoupled-lr"),
        (("--decoupled-lr", "1e-4", "--decoupled-min-lr", "1e-3"), 1, "--decoupled-lr 0.0001 / --decoupled-min-lr"),
        (("--decoupled-lr", "-1"), 1, "--decoupled-lr -1.0"),
        (("--micro-batch-size", "0"), 1, "--micro-batch-size 0"),
        (("--log-interval", "0"), 1, "--log-interval 0"),
        (("--adam-beta2", "1"), 1, "--adam-beta2"),
        (("--split", "98,x"), 1, "--split"),
        (("--num-query-groups", "3"), 1, "--num-attention-heads 16 is not divisible by --num-query-groups 3"),
        (("--vocab-size", "95", "--tensor-model-parallel-size", "2"), 2, "--vocab-size 95 is not divisible"),
        (("--seq-length", "64", "--max-position-embeddings", "32"), 1, "--seq-length 64 exceeds"),
        (("--exit-signal-save",), 1, "--exit-signal-save needs --save"),
    ],
)
def test_bad_input_names_the_flag(data: str, extra: tuple, world: int, flag: str) -> None:
    config = parse(_args(data, *extra))
    with pytest.raises(ValueError, match=flag):
        plan(config, world)


def test_missing_data_prefix(tmp_path: Path) -> None:
    config = parse([*MODEL, "--train-iters", "4", "--data-path", str(tmp_path / "nope")])
    with pytest.raises(ValueError, match=r"--data-path: dataset .*nope has no .*nope\.bin"):
        plan(config, 1)


def test_weighted_blend_parses_like_megatron() -> None:
    assert data_blend(["0.7", "ko", "0.3", "en"]) == (["ko", "en"], [0.7, 0.3])
    assert data_blend(["ko"]) == (["ko"], None)
    with pytest.raises(ValueError, match="--data-path"):
        data_blend(["0.7", "ko", "0.3"])
    assert eval_sets(["en=/a/en", "ko=/b/ko"]) == {"en": "/a/en", "ko": "/b/ko"}


def test_tokenizer_sets_or_checks_the_vocabulary(tmp_path: Path, data: str) -> None:
    from megatron_scale.data.tokenizer import train_byte_bpe

    tok = train_byte_bpe(["some text to learn from, some more text"] * 20, 300, str(tmp_path / "tok"))
    n = len(json.loads(Path(tok, "tokenizer.json").read_text())["model"]["vocab"])
    assert 257 < n <= 300
    flags = ("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok)
    config = parse(_args(data, *flags))  # MODEL's --vocab-size 96 < the tokenizer's
    with pytest.raises(ValueError, match=rf"--tokenizer-model .*tok has {n} tokens but the model's --vocab-size is 96"):
        plan(config, 1)
    model = list(MODEL)
    del model[model.index("--vocab-size"):model.index("--vocab-size") + 2]
    config = parse([*model, "--train-iters", "4", "--data-path", data, *flags, "--tensor-model-parallel-size", "2"])
    assert plan(config, 2).architecture.vocab_size == 512  # padded to a multiple of 128 x TP, as Megatron-LM pads
    with pytest.raises(ValueError, match="--tokenizer-type and --tokenizer-model go together"):
        plan(parse(_args(data, "--tokenizer-model", tok)), 1)

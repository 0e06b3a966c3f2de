"""The preflight (training/plan.py): from a TrainConfig to a run that can start.

- Bad input stops before any process group, with one message naming the flag.
- What a SCALE start costs before its first step: how often the checkpoint's records are read
  (each read re-reads .metadata and stats every shard, records.py) and how often the SCALE
  geometry is resolved against the base (each resolve checks every size again and logs its size
  notes). One rank runs the entry's own `setup` (plan, build, first weights, optimizer, data) with
  counters wrapped around `records.read_records` (every module that imported it) and
  `ScaleConfig.resolve`: starting from an upscaled SCALE checkpoint, resuming the run checkpoint
  that start saved, and starting from the base.
What --load's records fill in is tested in tests/training/test_from_load.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from megatron_scale.training.config import data_blend, eval_sets, parse
from megatron_scale.training.plan import plan
from tests._dist import run_ranks
from megatron_scale.testing.runs import MODEL, RUN, make_dataset


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
        (("--eval-data-path", "en"), 1, "--eval-data-path"),
        (("--fp8-format", "hybrid"), 1, "--fp8-format needs --transformer-impl transformer_engine"),
        (("--fp8-recipe", "tensorwise"), 1, "--fp8-recipe needs --fp8-format"),
        (("--gradient-accumulation-fusion",), 1, "--gradient-accumulation-fusion needs --transformer-impl"),
        (("--transformer-impl", "transformer_engine", "--fp8-format", "hybrid"), 1, "--fp8-format needs --bf16"),
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
        (("--eval-iterations", "0", "5"), 1, "--eval-iterations 5: every iteration must lie between 0 and --train-iters 4"),
        (("--eval-iterations", "0", "2", "2"), 1, r"--eval-iterations: \[0, 2, 2\] names an iteration twice"),
        (("--eval-iterations", "2", "--eval-interval", "2"), 1, "--eval-iterations and --eval-interval"),
        (("--save-iterations", "2"), 1, "--save-iterations needs --save"),
        (("--save-iterations", "0", "--save", "/tmp/unused"), 1, "--save-iterations 0: every iteration must lie between 1"),
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


def _counted_setup(rank: int, world: int, argv: list[str], save: bool) -> dict[str, int]:
    import sys

    from megatron_scale.checkpoint import records
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.training import loop

    counts = {"read_records": 0, "resolve": 0}
    reader, resolve = records.read_records, ScaleConfig.resolve

    def counted_read(*args: Any, **kwargs: Any) -> Any:
        counts["read_records"] += 1
        return reader(*args, **kwargs)

    def counted_resolve(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["resolve"] += 1
        return resolve(self, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("megatron_scale") and getattr(module, "read_records", None) is reader:
            module.read_records = counted_read  # type: ignore[attr-defined]
    ScaleConfig.resolve = counted_resolve  # type: ignore[method-assign]
    run = loop.setup(parse(argv))
    at_setup = dict(counts)
    if save:  # one step, so that the run checkpoint holds optimizer state to resume
        loop.train_step(run)
        run.save()
    return at_setup


@pytest.fixture(scope="module")
def upscaled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint
    from tests.convert import _hf

    root = tmp_path_factory.mktemp("plan")
    _hf.make_hf(root / "hf", tied=True)
    convert_hf_to_megatron(root / "hf", root / "base", tp=1, progress=False)
    upscale_checkpoint(root / "base", root / "up", ScaleConfig(variant="preserve", seed=5), tp=1)
    return {"base": str(root / "base"), "up": str(root / "up"), "data": make_dataset(root / "ko", seed=1), "run": str(root / "run")}


@pytest.mark.dist
def test_record_reads_and_geometry_resolves_per_scale_start(upscaled: dict) -> None:
    argv = [*RUN, "--train-iters", "4", "--data-path", upscaled["data"], "--method", "scale-preserve"]
    start = run_ranks(_counted_setup, 1, [*argv, "--load", upscaled["up"], "--save", upscaled["run"]], True)[0]
    resume = run_ranks(_counted_setup, 1, [*argv, "--load", upscaled["run"]], False)[0]
    # The plan reads the records once and hands them on; the recorded geometry is the method, so
    # nothing resolves it again (main at 8fee6e0, before the method protocol: 3 reads and 3
    # resolves starting, 2 reads and 3 resolves resuming).
    assert start == {"read_records": 1, "resolve": 0}, start
    assert resume == {"read_records": 1, "resolve": 0}, resume


@pytest.mark.dist
def test_a_start_from_a_base_resolves_the_geometry_once(upscaled: dict) -> None:
    argv = [*RUN, "--train-iters", "4", "--data-path", upscaled["data"], "--method", "scale-preserve"]
    base = run_ranks(_counted_setup, 1, [*argv, "--load", upscaled["base"]], False)[0]
    assert base == {"read_records": 1, "resolve": 1}, base

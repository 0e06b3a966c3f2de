"""The typed training configuration: the parser comes from the components, flags keep
Megatron-LM's names, help is each field's docstring."""

from __future__ import annotations


import pytest

from megatron_scale.flags import field_docs, flag_names, given
from megatron_scale.model.args import FLAGS, LlamaArgs
from megatron_scale.training.config import (
    OptimConfig, build_parser, parse,
)

REQUIRED = ["--micro-batch-size", "2", "--global-batch-size", "4", "--seq-length", "32", "--train-iters", "3",
            "--lr", "1e-3", "--data-path", "a"]


def test_every_flag_is_declared_once_with_help() -> None:
    parser = build_parser()
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    assert len(flags) == len(set(flags))
    for name in ("--tensor-model-parallel-size", "--micro-batch-size", "--lr", "--data-path", "--load",
                 "--num-layers", "--untie-embeddings-and-output-weights", "--scale-router-tau", "--no-eval-at-start"):
        assert name in flags, name
    missing_help = [a.option_strings for a in parser._actions if a.option_strings != ["-h", "--help"] and not a.help]
    assert missing_help == []
    # the help is the field's docstring
    lr = next(a for a in parser._actions if "--lr" in a.option_strings)
    assert lr.help == field_docs(OptimConfig)["lr"] == "Peak learning rate."
    assert FLAGS == flag_names(LlamaArgs) and FLAGS["rope_scaling"] == "--use-rope-scaling"


def test_parse_fills_each_component() -> None:
    cfg = parse([*REQUIRED, "--num-layers", "4", "--method", "scale-adapt", "--scale-adapt-layers", "1,2",
                 "--scale-seed", "7", "--seed", "3", "--no-eval-at-start", "--tensor-model-parallel-size", "2"])
    assert cfg.model.architecture.num_layers == 4 and cfg.model.architecture.hidden_size is None
    assert cfg.method.name == "scale-adapt" and cfg.method.scale.adapt_layers == (1, 2)
    # --seed and --scale-seed are two settings of two components
    assert cfg.schedule.seed == 3 and cfg.method.scale.seed == 7
    assert given(cfg.method.scale) == {"adapt_layers": (1, 2), "seed": 7}
    assert cfg.logging.eval_at_start is False and cfg.parallel.tp == 2
    assert cfg.data.data_path == ("a",) and cfg.optim.lr == 1e-3


def test_required_flags_are_required() -> None:
    with pytest.raises(SystemExit):
        parse(REQUIRED[2:])  # no --micro-batch-size

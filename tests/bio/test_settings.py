"""bio/settings.py: the biography benchmark's settings hold the methods' own MethodConfig, parsed
from the training entry's method flags (issue 63):
- every method flag (MethodConfig's but --method, SCALE's --scale-* among them) is a flag of
  tools/biography_benchmark.py, and what it is given lands in Settings.method as the training
  entry's parser would put it;
- the benchmark's older spellings (--router-tau, --gate-tau, ...: SCALE's router and gate flags
  without "scale-") and defaults keep working;
- which settings a task-1 stage is keyed by follows from the methods' flags classes;
- every stage file committed under results/ is still the stage the same settings would make."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from megatron_scale.bio.settings import (
    METHOD_SETTINGS, UNREAD, Settings, method_config, protocol_method, record, setting_name, settings_from, stage_key,
)
from megatron_scale.flags import given
from megatron_scale.methods import METHOD_CLASSES
from megatron_scale.training.config import MethodConfig, build_parser, method_flag_values, parse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import biography_benchmark  # noqa: E402


def _parse(*argv: str) -> Settings:
    return settings_from(biography_benchmark.build_parser().parse_args(["--out", "x", *argv]), Settings())


TRAINING = ["--micro-batch-size", "1", "--global-batch-size", "1", "--seq-length", "8", "--train-iters", "1",
            "--lr", "1e-3", "--data-path", "a"]
METHOD_ARGV = ["--freeze-layers", "2", "--llama-pro-blocks", "1", "--lora-rank", "64", "--lora-alpha", "3",
               "--lora-dropout", "0.1", "--scale-hidden-up", "32", "--scale-init", "normal", "--scale-adapt-layers", "0 1",
               "--scale-adapt-modules", "qkv,fc1", "--scale-route-adapt", "--scale-router-tau", "0.3",
               "--scale-router-unit", "char", "--scale-output-rows", "hangul", "--scale-gate-statistic", "max-prob",
               "--scale-gate-tau", "0.8", "--scale-base-backward", "full", "--scale-seed", "7"]
"""Method flags of every kind (int, float, choice, switch, list; SCALE's among them)."""


def test_every_method_flag_is_a_flag_of_the_biography_benchmark() -> None:
    training = {a for action in build_parser()._actions for a in action.option_strings}
    bio = {a for action in biography_benchmark.build_parser()._actions for a in action.option_strings}
    flags = set(method_flag_values(MethodConfig()))
    assert len(flags) > 20 and flags <= training and flags <= bio
    # and what they are given lands in Settings.method as the training entry's parser puts it in its MethodConfig
    trained, got = parse([*TRAINING, *METHOD_ARGV]).method, _parse(*METHOD_ARGV).method
    assert method_flag_values(got) == method_flag_values(trained)
    assert given(got.scale) == given(trained.scale) and len(given(got.scale)) == 12
    assert (got.freeze_layers, got.lora_rank, got.scale.adapt_layers) == (2, 64, (0, 1))


def test_the_benchmarks_older_flag_names_and_defaults_keep_working() -> None:
    s = _parse("--router-tau", "0.3", "--router-statistic", "max-prob", "--router-direction", "below",
               "--gate-statistic", "max-prob", "--gate-tau", "0.8", "--gate-temperature", "0.05",
               "--gate-direction", "below", "--lora-rank", "64", "--lora-alpha", "3", "--freeze-layers", "2",
               "--methods", "full", "lora", "--routed-baselines", "--task1-lrs", "1e-3", "3e-3")
    assert given(s.method.scale) == {"router_tau": 0.3, "router_statistic": "max-prob", "router_direction": "below",
                                     "gate_statistic": "max-prob", "gate_tau": 0.8, "gate_temperature": 0.05,
                                     "gate_direction": "below"}
    assert (s.method.lora_rank, s.method.lora_alpha, s.method.freeze_layers) == (64, 3.0, 2)
    assert s.methods == ("full", "lora") and s.routed_baselines and s.task1_lrs == (1e-3, 3e-3)
    r = record(s)
    assert (r["router_tau"], r["gate_tau"], r["lora_rank"], r["freeze_layers"]) == (0.3, 0.8, 64, 2)
    # the defaults: the preset's, and the protocol's own two (Freeze: the bottom 3/4; LoRA: alpha 2 x rank)
    plain = _parse()
    assert plain == Settings() and plain.method == protocol_method() and plain.method.lora_rank == 8
    assert method_config(plain, "freeze").freeze_layers == 3 and method_config(plain, "lora").lora_alpha == 16.0
    wide = _parse("--num-layers", "12", "--lora-rank", "64")
    assert method_config(wide, "freeze").freeze_layers == 9 and method_config(wide, "lora").lora_alpha == 128.0
    assert method_config(wide, "lora").name == "lora"


def test_a_stage_is_keyed_by_its_own_methods_flags() -> None:
    for cls in METHOD_CLASSES:
        mine = set() if cls.flags is None else {setting_name(f) for f in method_flag_values(MethodConfig(), cls.flags)}
        for name in cls.names:
            keyed = set(stage_key(Settings(), name)) & set(METHOD_SETTINGS)
            assert keyed == mine and set(UNREAD[name]) >= set(METHOD_SETTINGS) - mine, name
    assert set(METHOD_SETTINGS).isdisjoint(stage_key(Settings()))  # pre-training and task 0 read no method's


def _settings_of(doc: dict) -> Settings:
    """The Settings a stage file's settings were made with, through the benchmark's own parser."""
    ns = biography_benchmark.build_parser().parse_args(["--out", "x"])
    for f in dataclasses.fields(Settings):
        if f.name in doc:
            setattr(ns, f.name, doc[f.name])
    for flag_name in method_flag_values(MethodConfig()):
        if doc.get(setting_name(flag_name)) is not None:
            setattr(ns, flag_name.removeprefix("--").replace("-", "_"), doc[setting_name(flag_name)])
    return settings_from(ns, Settings())


def test_every_committed_stage_file_is_still_the_stage_its_settings_make() -> None:
    """bio/protocol.py stage(): a file is read back when each setting of the key equals the file's
    (a setting the file predates: the default). Held over every stage file under results/."""
    files = sorted((ROOT / "results").glob("**/stages/*.json"))
    assert len(files) > 150
    defaults = record(Settings())
    for path in files:
        doc = json.loads(path.read_text())["settings"]
        m = re.fullmatch(r"task1_(?P<method>[^+]+?)(\+[^_]*)?_lr[^_]+\.json", path.name)
        key = stage_key(_settings_of(doc), m["method"] if m else None)
        was = {k: doc.get(k, defaults[k]) for k in key}
        assert json.loads(json.dumps(was)) == json.loads(json.dumps(key)), path


@pytest.mark.parametrize("bad", [["--methods"], ["--lora-alpha", "0"], ["--gate-temperature", "0"]])
def test_bad_settings_are_refused_by_name(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="--methods|--lora-alpha|--scale-gate-temperature"):
        _parse(*bad).check()


def test_the_parser_is_made_from_the_fields() -> None:
    actions = {a.dest: a for a in biography_benchmark.build_parser()._actions}
    for f in dataclasses.fields(Settings):
        if f.name != "method":
            assert f.name in actions and actions[f.name].help, f.name
    assert isinstance(actions["seeds"], argparse.Action) and "method" not in actions

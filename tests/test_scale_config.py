"""SCALE settings: defaults as scale-method.md decides them, and every bad setting refused
before any model exists, with one message naming the setting and its flag."""

from __future__ import annotations

from typing import Any

import pytest

from megatron_scale.scale_config import ScaleConfig, ScaleConfigError, size_notes
from tests import _tiny


def _base(**overrides: Any) -> Any:
    return _tiny.base_config(1, **overrides)


def test_defaults_follow_the_method() -> None:
    dims = ScaleConfig().resolve(_base())
    assert (dims.hidden_up, dims.heads_up, dims.groups_up, dims.ffn_up) == (
        _tiny.HIDDEN // 4, _tiny.HEADS // 4, _tiny.GROUPS // 4, _tiny.FFN // 4,
    )
    assert dims.heads_up // dims.groups_up == _tiny.HEADS // _tiny.GROUPS
    assert dims.head_dim == _tiny.HEAD_DIM
    assert dims.variant == "preserve" and dims.init == "svd" and dims.router.tau == 0.5
    assert dims.adapt_layers == frozenset() and dims.adapt_modules == frozenset()
    adapt = ScaleConfig(variant="adapt").resolve(_base())
    assert adapt.adapt_layers == frozenset(range(_tiny.LAYERS // 2, _tiny.LAYERS))
    assert adapt.adapt_modules == frozenset({"qkv", "proj"})
    assert ScaleConfig(variant="route").resolve(_base()).adapt_layers == frozenset()
    assert ScaleConfig(variant="route", route_adapt=True).resolve(_base()).adapt_layers == adapt.adapt_layers
    # g' = max(1, g/4) when g/4 < 1 keeps the GQA ratio only if h' follows it
    small = ScaleConfig(heads_up=2).resolve(_base(num_attention_heads=8, num_query_groups=4))
    assert (small.heads_up, small.groups_up) == (2, 1)


def test_widened_config_keeps_the_head_size() -> None:
    dims = ScaleConfig().resolve(_base())
    wide = dims.widened(_base())
    assert wide.hidden_size == _tiny.HIDDEN + dims.hidden_up
    assert wide.num_attention_heads == _tiny.HEADS + dims.heads_up
    assert wide.num_query_groups == _tiny.GROUPS + dims.groups_up
    assert wide.ffn_hidden_size == _tiny.FFN + dims.ffn_up
    assert wide.kv_channels == _tiny.HEAD_DIM


@pytest.mark.parametrize(
    ("settings", "tp", "named"),
    [
        ({"hidden_up": -4}, 1, "hidden_up"),
        ({"heads_up": 0}, 1, "heads_up"),
        ({"ffn_up": -1}, 1, "ffn_up"),
        ({"groups_up": -2}, 1, "groups_up"),
        ({"heads_up": 4, "groups_up": 1}, 1, "groups_up"),          # 4/1 != base ratio 16/8
        ({"heads_up": 2, "groups_up": 1}, 2, "groups_up"),          # 1 group over 2 ranks
        ({"heads_up": 6, "groups_up": 3}, 2, "groups_up"),          # 3 groups over 2 ranks
        ({"heads_up": 6, "groups_up": 3}, 4, "heads_up"),           # 6 heads over 4 ranks
        ({"ffn_up": 33}, 2, "ffn_up"),
        ({"variant": "preserve-all"}, 1, "variant"),
        ({"init": "orthogonal"}, 1, "init"),
        ({"adapt_modules": ("qkv", "gate")}, 1, "adapt_modules"),
        ({"variant": "adapt", "adapt_layers": (0, 7)}, 1, "adapt_layers"),
        ({"init_std": -0.1}, 1, "init_std"),
    ],
)
def test_bad_settings_name_the_setting(settings: dict, tp: int, named: str) -> None:
    with pytest.raises(ScaleConfigError) as err:
        ScaleConfig(**settings).resolve(_base(tensor_model_parallel_size=tp), tp)
    message = str(err.value)
    assert f"ScaleConfig.{named}" in message and "--scale-" + named.replace("_", "-") in message, message


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"add_bias_linear": True}, "add_bias_linear"),
        ({"normalization": "LayerNorm"}, "normalization"),
        ({"gated_linear_unit": False}, "gated_linear_unit"),
    ],
)
def test_unsupported_base_is_named(overrides: dict, named: str) -> None:
    with pytest.raises(ScaleConfigError, match=named):
        ScaleConfig().resolve(_base(**overrides))


def test_refused_before_any_model_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron_scale import _mcore as mc
    from megatron_scale.model import build as builder

    def built(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(mc.GPTModel, "__init__", built)
    monkeypatch.setattr(builder, "get_scale_block_spec", built)
    with pytest.raises(ScaleConfigError, match="groups_up"):
        builder.build_scale_gpt(_base(), ScaleConfig(heads_up=4, groups_up=3), vocab_size=_tiny.VOCAB,
                                max_sequence_length=_tiny.SEQ)


# SmolLM2-135M's attention: 9 query heads over 3 KV groups (ratio 3); h/4 = 2.25 is no whole group
SMOL = {"num_attention_heads": 9, "num_query_groups": 3, "hidden_size": 576, "ffn_hidden_size": 1536,
        "kv_channels": 64}


@pytest.mark.parametrize(("base", "tp", "picked"), [
    (SMOL, 1, (3, 1)),                                               # 2.25 heads -> one group of 3
    (SMOL, 3, (9, 3)),                                               # groups divisible by TP 3
    ({}, 4, (8, 4)),                                                 # tiny base (16/8): 2 groups over 4 ranks -> 4
    ({"num_attention_heads": 24, "num_query_groups": 8}, 4, (12, 4)),  # Llama-3.2-3B's ratio 3 at TP 4
])
def test_defaults_pick_the_nearest_valid_geometry(base: dict, tp: int, picked: tuple[int, int]) -> None:
    cfg = ScaleConfig()
    dims = cfg.resolve(_base(tensor_model_parallel_size=tp, **base), tp)
    assert (dims.heads_up, dims.groups_up) == picked
    assert dims.heads_up // dims.groups_up == dims.heads // dims.groups
    assert dims.groups_up % tp == 0 and dims.ffn_up % tp == 0
    notes = size_notes(cfg, dims, tp)
    assert len(notes) == 1 and "--scale-heads-up" in notes[0] and f"= {picked[0]}, {picked[1]}" in notes[0], notes


@pytest.mark.parametrize(("base", "tp"), [({}, 1), ({}, 2), ({"num_attention_heads": 32, "num_query_groups": 8}, 1),
                                          ({"num_attention_heads": 8, "num_query_groups": 4}, 1)])
def test_defaults_unchanged_where_the_quarter_rule_works(base: dict, tp: int) -> None:
    cfg = ScaleConfig()
    b = _base(tensor_model_parallel_size=tp, **base)
    dims = cfg.resolve(b, tp)
    h = b.num_attention_heads
    assert (dims.hidden_up, dims.heads_up, dims.groups_up, dims.ffn_up) == (
        b.hidden_size // 4, h // 4, max(1, h // 4 // (h // b.num_query_groups)), b.ffn_hidden_size // 4)
    assert size_notes(cfg, dims, tp) == []


def test_ffn_default_rounds_to_a_multiple_of_tp() -> None:
    cfg = ScaleConfig()
    dims = cfg.resolve(_base(tensor_model_parallel_size=2, ffn_hidden_size=132), 2)  # f/4 = 33
    assert dims.ffn_up == 32 and any("--scale-ffn-up" in n for n in size_notes(cfg, dims, 2))


def test_one_size_given_completes_the_other_at_the_gqa_ratio() -> None:
    dims = ScaleConfig(groups_up=2).resolve(_base(**SMOL))
    assert (dims.heads_up, dims.groups_up) == (6, 2)
    dims = ScaleConfig(heads_up=6).resolve(_base(**SMOL))
    assert (dims.heads_up, dims.groups_up) == (6, 2)


@pytest.mark.parametrize(("settings", "tp", "named", "nearest"), [
    ({"heads_up": 2}, 1, "heads_up", "--scale-heads-up 3 --scale-groups-up 1"),
    ({"heads_up": 4}, 1, "heads_up", "--scale-heads-up 3 --scale-groups-up 1 or --scale-heads-up 6 --scale-groups-up 2"),
    ({"heads_up": 3}, 3, "heads_up", "--scale-heads-up 9 --scale-groups-up 3"),
    ({"groups_up": 2}, 3, "groups_up", "--scale-heads-up 9 --scale-groups-up 3"),
    ({"heads_up": 6, "groups_up": 3}, 1, "groups_up", "--scale-heads-up 6 --scale-groups-up 2"),
    ({"ffn_up": 100}, 3, "ffn_up", "--scale-ffn-up 99 or --scale-ffn-up 102"),
])
def test_impossible_sizes_name_the_flag_and_the_nearest_valid(settings: dict, tp: int, named: str,
                                                              nearest: str) -> None:
    with pytest.raises(ScaleConfigError) as err:
        ScaleConfig(**settings).resolve(_base(tensor_model_parallel_size=tp, **SMOL), tp)
    message = str(err.value)
    flag = "--scale-" + named.replace("_", "-")
    assert message.startswith(f"ScaleConfig.{named} ({flag}):") and f"nearest valid: {nearest}" in message, message


@pytest.mark.parametrize("settings", [
    {}, {"variant": "adapt", "adapt_layers": (1, 3), "adapt_modules": ("fc1", "qkv")},
    {"variant": "route", "route_adapt": True, "router_tau": 0.7, "router_statistic": "max-prob", "seed": 7},
    {"variant": "route", "router_statistic": "cosine", "router_direction": "below"},
    {"variant": "route", "router_direction": "below", "router_unit": "word"},
    {"output_rows": "hangul"},
    {"variant": "route", "gate_statistic": "certainty", "gate_tau": 0.3, "gate_temperature": 0.1, "gate_direction": "below"},
])
def test_record_round_trip(settings: dict) -> None:
    """ScaleDims.to_record / from_record give back the same geometry; a record written before
    router_statistic / router_direction / router_unit existed reads as cosine / above / token; a
    missing or unknown key is one error naming where."""
    from megatron_scale.scale_config import ScaleDims

    dims = ScaleConfig(**settings).resolve(_base(), 2)
    record = dims.to_record()
    assert ScaleDims.from_record(record, where="ckpt") == dims
    old = {k: v for k, v in record.items()
           if k not in ("router_statistic", "router_direction", "router_unit", "output_rows")
           and not k.startswith("gate_")}
    oldest = ScaleDims.from_record(old, where="ckpt")
    assert (oldest.router.statistic, oldest.router.direction, oldest.router.unit) == ("cosine", "above", "token")
    assert oldest.training.output_rows == "all"
    assert not ScaleDims.from_record(old, where="ckpt").gated
    with pytest.raises(ScaleConfigError, match=r"^ckpt/iter_1: scale\.dims: .*missing key\(s\) \['seed'\]"):
        ScaleDims.from_record({k: v for k, v in record.items() if k != "seed"}, where="ckpt/iter_1: scale.dims")
    with pytest.raises(ScaleConfigError, match=r"^ckpt: .*unknown key\(s\) \['extra'\]"):
        ScaleDims.from_record({**record, "extra": 1}, where="ckpt")


def test_recorded_geometry_is_checked_against_its_base() -> None:
    from megatron_scale.model.build import build_scale_gpt

    dims = ScaleConfig().resolve(_base(), 1)
    dims.check_base(_base(), 1)
    with pytest.raises(ScaleConfigError, match=r"ScaleDims.ffn=.* does not match the base model's"):
        dims.check_base(_base(ffn_hidden_size=2 * _tiny.FFN))
    with pytest.raises(ScaleConfigError, match=r"heads_up.*not divisible by the tensor-parallel size 3"):
        dims.check_base(_base(), 3)
    with pytest.raises(ScaleConfigError, match=r"ScaleDims.hidden="):
        build_scale_gpt(_base(hidden_size=2 * _tiny.HIDDEN), dims, vocab_size=_tiny.VOCAB,
                        max_sequence_length=_tiny.SEQ)


def test_router_direction_defaults_to_above_and_a_bad_one_names_its_flag() -> None:
    """The paper's router keeps z_p where the statistic >= tau ("above"); "below" reverses it."""
    assert ScaleConfig(variant="route").resolve(_base(), 1).router.direction == "above"
    assert ScaleConfig(variant="route", router_direction="below").resolve(_base(), 1).router.direction == "below"
    with pytest.raises(ScaleConfigError, match=r"^--scale-router-direction: unknown router direction 'under'"):
        ScaleConfig(variant="route", router_direction="under").resolve(_base(), 1)


def test_router_unit_defaults_to_token_and_a_bad_one_names_its_flag() -> None:
    """The paper's router decides per token; char / word are recorded like the direction."""
    assert ScaleConfig(variant="route").resolve(_base(), 1).router.unit == "token"
    dims = ScaleConfig(variant="route", router_unit="char").resolve(_base(), 1)
    assert dims.router.unit == "char" and ScaleConfig.from_dims(dims).router_unit == "char"
    with pytest.raises(ScaleConfigError, match=r"^--scale-router-unit: unknown router unit 'byte'"):
        ScaleConfig(variant="route", router_unit="byte").resolve(_base(), 1)


def test_output_rows_default_to_all_and_a_bad_one_names_its_flag() -> None:
    """Every row of W_out_up trains (the paper's) unless --scale-output-rows names a script."""
    assert ScaleConfig().resolve(_base(), 1).training.output_rows == "all"
    dims = ScaleConfig(output_rows="hangul").resolve(_base(), 1)
    assert dims.training.output_rows == "hangul" and ScaleConfig.from_dims(dims).output_rows == "hangul"
    with pytest.raises(ScaleConfigError, match=r"^ScaleConfig.output_rows \(--scale-output-rows\): unknown rows 'latin'"):
        ScaleConfig(output_rows="latin").resolve(_base(), 1)


@pytest.mark.parametrize(("setting", "message"), [
    ({"gate_statistic": "cosine"}, "--scale-gate-statistic: unknown 'cosine'; choose one of none, max-prob, certainty"),
    ({"gate_temperature": 0.0}, "--scale-gate-temperature: must be a finite number > 0, got 0.0"),
    ({"gate_tau": float("nan")}, "--scale-gate-tau: must be a finite number, got nan"),
    ({"gate_direction": "under"}, "--scale-gate-direction: unknown 'under'; choose one of above, below"),
])
def test_a_bad_gate_setting_names_its_flag(setting: dict, message: str) -> None:
    """No gate by default (the paper's z_a); a gate's statistic is one of z_p alone."""
    assert not ScaleConfig().resolve(_base(), 1).gated
    with pytest.raises(ScaleConfigError) as e:
        ScaleConfig(**setting).resolve(_base(), 1)
    assert str(e.value) == message


def test_base_backward_skips_wherever_no_w12_exists_and_refuses_skip_with_it() -> None:
    """--scale-base-backward (issue 62): auto skips the base stream's backward for Preserve,
    Route, the gate and the rows, and keeps it where W12 exists (Adapt, Route on Adapt); skip
    asked for there is refused by name; full always computes it. The record holds the resolved
    value, and a record written before the setting existed takes auto's answer."""
    from megatron_scale.scale_config import ScaleDims

    resolved = {
        "preserve": ScaleConfig(), "route": ScaleConfig(variant="route"),
        "gate": ScaleConfig(gate_statistic="max-prob"), "rows": ScaleConfig(output_rows="hangul"),
        "adapt": ScaleConfig(variant="adapt"), "route_adapt": ScaleConfig(variant="route", route_adapt=True),
        "preserve_full": ScaleConfig(base_backward="full"), "preserve_skip": ScaleConfig(base_backward="skip"),
        "adapt_full": ScaleConfig(variant="adapt", base_backward="full"),
    }
    got = {name: sc.resolve(_base(), 1).training.base_backward for name, sc in resolved.items()}
    assert got == {"preserve": "skip", "route": "skip", "gate": "skip", "rows": "skip", "adapt": "full",
                   "route_adapt": "full", "preserve_full": "full", "preserve_skip": "skip", "adapt_full": "full"}
    for sc in (ScaleConfig(variant="adapt", base_backward="skip"),
               ScaleConfig(variant="route", route_adapt=True, base_backward="skip")):
        with pytest.raises(ScaleConfigError, match=r"^--scale-base-backward skip: SCALE-(adapt|route)'s W12 is a "
                                                   r"trainable parameter upstream of the base stream"):
            sc.resolve(_base(), 1)
    with pytest.raises(ScaleConfigError, match=r"^--scale-base-backward: unknown 'none'; choose one of auto, skip, full"):
        ScaleConfig(base_backward="none").resolve(_base(), 1)
    for sc in (ScaleConfig(), ScaleConfig(base_backward="full"), ScaleConfig(variant="adapt")):
        dims = sc.resolve(_base(), 1)
        assert ScaleDims.from_record(dims.to_record(), where="ckpt") == dims
        assert ScaleConfig.from_dims(dims).base_backward == dims.training.base_backward
        old = {k: v for k, v in dims.to_record().items() if k != "base_backward"}
        assert ScaleDims.from_record(old, where="ckpt").training.base_backward == ("full" if dims.adapt_layers else "skip")
    bad = {**ScaleConfig(variant="adapt").resolve(_base(), 1).to_record(), "base_backward": "skip"}
    with pytest.raises(ScaleConfigError, match=r"^ckpt: --scale-base-backward skip: SCALE-adapt's W12"):
        ScaleDims.from_record(bad, where="ckpt")

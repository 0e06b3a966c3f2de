"""SCALE's option groups as values (megatron_scale/scale_options.py): each check names the flag
its caller gives (a prefix, or a function of the setting's name), an override keeps what it does
not give, and the values convert to and from the flat keys the checkpoints and exports keep."""

from __future__ import annotations

from typing import Any

import pytest

from megatron_scale.scale_config import Gate, Router, RouterOverride, ScaleConfig, ScaleConfigError
from tests import _tiny


@pytest.mark.parametrize(("router", "flags", "message"), [
    (Router(tau=float("nan")), "--route-", "--route-tau: tau must be a finite number, got nan"),
    (Router(statistic="dot"), "--scale-router-", "--scale-router-statistic: unknown router statistic 'dot'"),
    (Router(direction="up"), lambda name: f"--router {name.upper()}", "--router DIRECTION: unknown router direction 'up'"),
    (Router(unit="byte"), "router ", "router unit: unknown router unit 'byte'"),
])
def test_a_bad_router_setting_is_one_error_naming_the_callers_flag(router: Router, flags: Any,
                                                                   message: str) -> None:
    with pytest.raises(ScaleConfigError) as e:
        router.check(flags)
    assert str(e.value).startswith(message)
    assert Router().check() == Router(tau=0.5, statistic="cosine", direction="above", unit="token")


def test_an_override_keeps_what_it_does_not_give_and_names_what_it_gives() -> None:
    mine = Router(tau=0.9, statistic="max-prob", direction="below", unit="char")
    assert RouterOverride().over(mine) == mine and RouterOverride().given_flags("--route-") == []
    given = RouterOverride(tau=0.2, unit="word")
    assert given.over(mine) == Router(tau=0.2, statistic="max-prob", direction="below", unit="word")
    assert given.given_flags("--route-") == ["--route-tau", "--route-unit"]
    assert Router().over(mine) == Router()  # a whole router replaces the model's


def test_a_router_travels_as_the_flat_keys_on_disk() -> None:
    dims = ScaleConfig(variant="route", router_tau=0.3, router_unit="char").resolve(_tiny.base_config(1), 1)
    assert dims.router == Router(tau=0.3, unit="char")
    assert dims.router.record("router_") == {"router_tau": 0.3, "router_statistic": "cosine",
                                             "router_direction": "above", "router_unit": "char"}
    other = dims.with_router(Router(tau=0.7, statistic="certainty"))
    assert other.router == Router(tau=0.7, statistic="certainty")
    assert other.to_record()["router_tau"] == 0.7
    with pytest.raises(ScaleConfigError, match="^--scale-router-tau"):
        dims.with_router(Router(tau=float("inf")))


def test_a_gate_is_off_by_default_names_its_flag_and_travels_as_the_flat_keys() -> None:
    assert not Gate().enabled and Gate(statistic="max-prob").enabled
    with pytest.raises(ScaleConfigError, match=r"^--scale-gate-temperature: must be a finite number > 0, got -1"):
        Gate(statistic="max-prob", temperature=-1).check()
    dims = ScaleConfig(gate_statistic="certainty", gate_tau=0.3).resolve(_tiny.base_config(1), 1)
    assert dims.gated and dims.gate == Gate(statistic="certainty", tau=0.3)
    assert Gate.of_record(dims.to_record(), "gate_") == dims.gate
    assert dims.gate.record("scale_gate_") == {"scale_gate_statistic": "certainty", "scale_gate_tau": 0.3,
                                               "scale_gate_temperature": 0.05, "scale_gate_direction": "above"}

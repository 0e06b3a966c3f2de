"""SCALE's option groups as values (stdlib only, below scale_config.py, which re-exports them).

    Router          how SCALE-Route picks a head per token: tau, statistic, direction, unit
    RouterOverride  a router's settings given in place of a model's (None: keep the model's)
    Gate            the per-token weight of W_out_up's term (model/layers/gate.py): statistic, tau,
                    temperature, direction; statistic none (the paper's) is no gate
    ScaleTraining   what a run trains of a geometry, recorded with it but not part of it: the output
                    rows, the gate, the backward through the base stream (a run may change them)

Each `check(flags)` raises one ScaleConfigError naming the flag of the setting that is not usable;
`flags` is the caller's flag prefix ("--scale-router-" for the training entry's flags, "--route-"
for an evaluation or export override) or a function of the setting's name (tau, statistic, ...).
On disk the settings stay flat (`router_tau`, ...); the values convert at that boundary.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

from megatron_scale.scale_checks import (
    GATE_STATISTICS, OUTPUT_ROWS, ROUTER_DIRECTIONS, ROUTER_STATISTICS, ROUTER_UNITS, ScaleConfigError, fail,
)

Flags = str | Callable[[str], str]
"""A flag prefix, or the flag of a setting's name."""


def flag_of(flags: Flags, name: str) -> str:
    """The flag `flags` gives the setting `name`."""
    return flags + name if isinstance(flags, str) else flags(name)


def finite(value: object) -> bool:
    """A real number (not a bool) that is finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Flat:
    """An option group that is kept as flat keys on disk (`prefix` + field name)."""

    def record(self, prefix: str = "") -> dict[str, Any]:
        """The settings as flat keys (`prefix` + name: the checkpoint's router_tau, ...)."""
        return {prefix + f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]  # a mixin of dataclasses only

    @classmethod
    def of_record(cls, record: Any, prefix: str = "") -> Self:
        """The value the flat keys `prefix` + name of `record` (a mapping or an object's attributes) hold."""
        read: Callable[[str], Any] = record.__getitem__ if isinstance(record, dict) else lambda k: getattr(record, k)
        return cls(**{f.name: read(prefix + f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]  # a mixin of dataclasses only


@dataclass(frozen=True, kw_only=True)
class Router(Flat):
    """SCALE-Route's router: z_p where `statistic` (route_stats/statistics.py) of (z_p, z_a) is
    >= tau (direction above, the paper's) or <= tau (below), decided per `unit` (token, the
    paper's; char or word: the unit's first token decides, model/layers/route_units.py)."""

    tau: float = 0.5
    statistic: str = "cosine"
    direction: str = "above"
    unit: str = "token"

    def check(self, flags: Flags = "--scale-router-") -> Router:
        """This router (tau as a float), or one ScaleConfigError naming the flag of the first setting
        that is not usable."""
        if not finite(self.tau):
            raise ScaleConfigError(f"{flag_of(flags, 'tau')}: tau must be a finite number, got {self.tau!r}")
        for name, known in (("statistic", ROUTER_STATISTICS), ("direction", ROUTER_DIRECTIONS), ("unit", ROUTER_UNITS)):
            value = getattr(self, name)
            if value not in known:
                raise ScaleConfigError(f"{flag_of(flags, name)}: unknown router {name} {value!r}; "
                                       f"choose one of {', '.join(known)}")
        return dataclasses.replace(self, tau=float(self.tau))

    def over(self, router: Router) -> Router:
        """This router in place of `router` (RouterOverride.over's twin: a whole router replaces one)."""
        return self


@dataclass(frozen=True, kw_only=True)
class RouterOverride:
    """Router settings given in place of a model's: each None keeps the model's."""

    tau: float | None = None
    statistic: str | None = None
    direction: str | None = None
    unit: str | None = None

    def given(self) -> dict[str, Any]:
        """The settings given, by name, in the router's order."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def given_flags(self, flags: Flags) -> list[str]:
        """The flags of the settings given (`flags`: as Router.check)."""
        return [flag_of(flags, k) for k in self.given()]

    def over(self, router: Router) -> Router:
        """`router` with the settings given in place of its own."""
        return dataclasses.replace(router, **self.given())


@dataclass(frozen=True, kw_only=True)
class Gate(Flat):
    """The gate of W_out_up's term: g = sigmoid((tau - s(z_p)) / temperature) (direction above;
    below: (s - tau)), s a statistic of z_p alone; statistic none: g = 1, the paper's z_a."""

    statistic: str = "none"
    tau: float = 0.5
    temperature: float = 0.05
    direction: str = "above"

    @property
    def enabled(self) -> bool:
        """Whether it gates at all (statistic none: it does not)."""
        return self.statistic != "none"

    def check(self, flags: Flags = "--scale-gate-") -> Gate:
        """This gate (tau and temperature as floats), or one ScaleConfigError naming the flag of the
        first setting that is not usable."""
        if self.statistic not in GATE_STATISTICS:
            raise ScaleConfigError(f"{flag_of(flags, 'statistic')}: unknown {self.statistic!r}; "
                                   f"choose one of {', '.join(GATE_STATISTICS)}")
        if not finite(self.tau):
            raise ScaleConfigError(f"{flag_of(flags, 'tau')}: must be a finite number, got {self.tau!r}")
        if not finite(self.temperature) or not self.temperature > 0:
            raise ScaleConfigError(f"{flag_of(flags, 'temperature')}: must be a finite number > 0, "
                                   f"got {self.temperature!r}")
        if self.direction not in ROUTER_DIRECTIONS:
            raise ScaleConfigError(f"{flag_of(flags, 'direction')}: unknown {self.direction!r}; "
                                   f"choose one of {', '.join(ROUTER_DIRECTIONS)}")
        return dataclasses.replace(self, tau=float(self.tau), temperature=float(self.temperature))


@dataclass(frozen=True, kw_only=True)
class ScaleTraining:
    """The settings a run trains a geometry with: recorded beside it (a checkpoint's) but not part
    of it, so a run from a checkpoint may change them (a flag given overrides the recorded value).
    On disk flat: output_rows, gate_statistic, ..., base_backward."""

    output_rows: str = "all"
    """Which rows of W_out_up train: all (the paper's) | a script's (model/layers/output_rows.py)."""
    gate: Gate = Gate()
    base_backward: str = "full"
    """skip | full once resolved on a geometry (ScaleDims.with_base_backward); auto before."""

    def record(self) -> dict[str, Any]:
        """The settings as the checkpoint's flat keys."""
        return {"output_rows": self.output_rows, **self.gate.record("gate_"), "base_backward": self.base_backward}

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> ScaleTraining:
        """The settings the flat keys of `record` hold."""
        return cls(output_rows=record["output_rows"], gate=Gate.of_record(record, "gate_"),
                   base_backward=record["base_backward"])

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The flat keys (the --scale-* settings of ScaleConfig they come from)."""
        return tuple(cls().record())

    def check(self) -> ScaleTraining:
        """The output rows and the gate (checked: one ScaleConfigError naming the --scale-* flag of
        the first that is not usable). base_backward is checked where it is resolved on a geometry
        (scale_checks.resolve_base_backward)."""
        if self.output_rows not in OUTPUT_ROWS:
            raise fail("output_rows", f"unknown rows {self.output_rows!r}; choose one of {', '.join(OUTPUT_ROWS)}")
        return dataclasses.replace(self, gate=self.gate.check())

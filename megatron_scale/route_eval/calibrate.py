"""Pick the router's direction and tau from held-out old-domain and new-domain tokens for a
stated target.

Target: at least `keep_old` of the old-domain tokens stay on the preservation head, and,
optionally, at least `min_new_adapt` of the new-domain tokens go to the adaptation head. A
direction says which side of tau keeps z_p: "above" (s >= tau, the paper's) or "below" (s <= tau).
In each direction, among the taus meeting the first target the one nearest the old tokens' far
end sends the most new tokens to z_a, so it is the one taken:

    above: tau = the floor(n (1 - keep_old))-th smallest old statistic
    below: tau = the floor(n (1 - keep_old))-th largest old statistic

Unless a direction is imposed, the direction chosen is the one whose tau sends more new-domain
tokens to z_a (the paper's "above" on a tie). Issue 35: on SmolLM2's byte-level Korean the cosine
is lower on English than on Korean, and only "below" separates them. The second target is then
met by that tau or by none; the result says which, with what was achieved on both sets in both
directions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from megatron_scale.scale_config import ROUTER_DIRECTIONS
from megatron_scale.model.layers.routing import keeps


class CalibrationError(ValueError):
    """A calibration target is not a share in (0, 1] (or a direction is unknown); the message names the flag."""


@dataclass(frozen=True)
class Calibration:
    tau: float
    statistic: str
    direction: str  # "above": z_p where s >= tau; "below": z_p where s <= tau
    keep_old_target: float
    min_new_adapt_target: float | None
    old_kept: float
    new_adapted: float
    reachable: bool
    message: str
    new_adapted_by_direction: dict[str, float]  # what each direction's tau sends to z_a (the choice's reason)

    def record(self) -> dict[str, Any]:
        return asdict(self)


def check_share(flag: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, int | float) and 0.0 < value <= 1.0):
        raise CalibrationError(f"{flag}: must be a share in (0, 1], got {value!r}")


def side(statistic: str, direction: str) -> str:
    """'cosine >= tau' or 'cosine <= tau': where z_p is kept, for labels."""
    return f"{statistic} {'>=' if direction == 'above' else '<='} tau"


def _tau(old: torch.Tensor, keep_old: float, direction: str) -> float:
    """The tau keeping >= keep_old of `old` on z_p in `direction`, nearest the far end."""
    o = old.float().flatten().sort(descending=direction == "below").values
    allowed = math.floor(o.numel() * (1.0 - keep_old) + 1e-9)  # old tokens that may go to z_a
    return float(o[min(allowed, o.numel() - 1)])


def calibrate(old: torch.Tensor, new: torch.Tensor, statistic: str, keep_old: float,
              min_new_adapt: float | None = None, direction: str | None = None) -> Calibration:
    """The direction (`direction`, or None: the better one) and tau keeping >= keep_old of `old`
    on z_p with the most of `new` sent to z_a; `reachable` tells whether that is also
    >= min_new_adapt (always True without that target)."""
    check_share("--keep-old", keep_old)
    check_share("--min-new-adapt", min_new_adapt)
    if direction is not None and direction not in ROUTER_DIRECTIONS:
        raise CalibrationError(f"--direction: unknown router direction {direction!r}; choose auto or one of "
                               f"{', '.join(ROUTER_DIRECTIONS)}")
    if old.numel() == 0 or new.numel() == 0:
        raise CalibrationError("calibration needs tokens in both the old-domain and the new-domain set")
    o, n = old.float().flatten(), new.float().flatten()
    taus = {d: _tau(o, keep_old, d) for d in ROUTER_DIRECTIONS}
    adapted = {d: float((~keeps(n, taus[d], d)).double().mean()) for d in ROUTER_DIRECTIONS}
    chosen = direction or ("below" if adapted["below"] > adapted["above"] else "above")
    tau = taus[chosen]
    old_kept = float(keeps(o, tau, chosen).double().mean())
    new_adapted = adapted[chosen]
    reachable = min_new_adapt is None or new_adapted >= min_new_adapt
    other = "below" if chosen == "above" else "above"
    why = (f"imposed; {other} would send {adapted[other]:.4f}" if direction else
           f"chosen over {other}, which sends {adapted[other]:.4f} of new-domain tokens to z_a")
    where = f"z_p where {side(statistic, chosen)} ({chosen}, {why})"
    got = f"old-domain kept on z_p {old_kept:.4f} (target >= {keep_old:g}), new-domain sent to z_a {new_adapted:.4f}"
    if min_new_adapt is None:
        message = f"tau = {tau:.6g}, {where}: {got}"
    elif reachable:
        message = f"tau = {tau:.6g}, {where}: {got} (target >= {min_new_adapt:g}): both targets reached"
    else:
        message = (f"target unreachable with {statistic} ({chosen}): keeping >= {keep_old:g} of old-domain tokens "
                   f"on z_p with {where} needs tau = {tau:.6g}, which sends only {new_adapted:.4f} of new-domain "
                   f"tokens to z_a (target >= {min_new_adapt:g}); best tau for the first target given")
    return Calibration(tau=tau, statistic=statistic, direction=chosen, keep_old_target=keep_old,
                       min_new_adapt_target=min_new_adapt, old_kept=old_kept, new_adapted=new_adapted,
                       reachable=reachable, message=message, new_adapted_by_direction=adapted)

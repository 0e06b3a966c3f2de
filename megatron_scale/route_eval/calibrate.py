"""Pick tau from held-out old-domain and new-domain tokens for a stated target.

Target: at least `keep_old` of the old-domain tokens stay on the preservation head (s >= tau),
and, optionally, at least `min_new_adapt` of the new-domain tokens go to the adaptation head
(s < tau). Among the taus meeting the first, the largest sends the most new tokens to z_a, so it
is the one chosen: tau = the floor(n (1 - keep_old))-th smallest old statistic. The second target
is then met by that tau or by none; the result says which, with what was achieved on both sets.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch


class CalibrationError(ValueError):
    """A calibration target is not a share in (0, 1]; the message names the flag."""


@dataclass(frozen=True)
class Calibration:
    tau: float
    statistic: str
    keep_old_target: float
    min_new_adapt_target: float | None
    old_kept: float
    new_adapted: float
    reachable: bool
    message: str

    def record(self) -> dict[str, Any]:
        return asdict(self)


def check_share(flag: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, int | float) and 0.0 < value <= 1.0):
        raise CalibrationError(f"{flag}: must be a share in (0, 1], got {value!r}")


def calibrate(old: torch.Tensor, new: torch.Tensor, statistic: str, keep_old: float,
              min_new_adapt: float | None = None) -> Calibration:
    """The largest tau keeping >= keep_old of `old` on z_p; `reachable` tells whether it also
    sends >= min_new_adapt of `new` to z_a (always True without that target)."""
    check_share("--keep-old", keep_old)
    check_share("--min-new-adapt", min_new_adapt)
    if old.numel() == 0 or new.numel() == 0:
        raise CalibrationError("calibration needs tokens in both the old-domain and the new-domain set")
    o = old.float().flatten().sort().values
    allowed = math.floor(o.numel() * (1.0 - keep_old) + 1e-9)  # old tokens that may go to z_a
    tau = float(o[min(allowed, o.numel() - 1)])
    old_kept = float((o >= tau).double().mean())
    new_adapted = float((new.float() < tau).double().mean())
    reachable = min_new_adapt is None or new_adapted >= min_new_adapt
    got = f"old-domain kept on z_p {old_kept:.4f} (target >= {keep_old:g}), new-domain sent to z_a {new_adapted:.4f}"
    if min_new_adapt is None:
        message = f"tau = {tau:.6g} ({statistic}): {got}"
    elif reachable:
        message = f"tau = {tau:.6g} ({statistic}): {got} (target >= {min_new_adapt:g}): both targets reached"
    else:
        message = (f"target unreachable with {statistic}: keeping >= {keep_old:g} of old-domain tokens on z_p "
                   f"needs tau <= {tau:.6g}, which sends only {new_adapted:.4f} of new-domain tokens to z_a "
                   f"(target >= {min_new_adapt:g}); best tau for the first target given")
    return Calibration(tau=tau, statistic=statistic, keep_old_target=keep_old, min_new_adapt_target=min_new_adapt,
                       old_kept=old_kept, new_adapted=new_adapted, reachable=reachable, message=message)

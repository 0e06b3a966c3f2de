"""Every check of a run's flags, before any process group or model exists: one error, naming
the flag (or --load's record), that the entry prints as one line.

    inherit_from_load   the model, SCALE and LoRA settings --load records; a resumed LR schedule
    validate            layout, batch, schedule, shapes, data, TE/FP8, method settings
"""

from __future__ import annotations

import argparse

from megatron_scale.training.arguments import validate
from megatron_scale.training.inherit import inherit_from_load


class FlagError(ValueError):
    """A flag (or the checkpoint --load names) cannot make a run; the message names it."""


def check_args(args: argparse.Namespace, world_size: int) -> None:
    """Complete `args` from --load and check them all; raises FlagError."""
    try:
        inherit_from_load(args)
        validate(args, world_size)
    except ValueError as e:
        raise FlagError(str(e)) from e

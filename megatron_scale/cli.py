"""Command-line pieces shared by the training entry and the tools.

The `--scale-*` flags mean the same thing everywhere (training with --load of a base checkpoint,
tools/upscale_checkpoint.py), so they are declared once here; `run_tool` is how every tool reports:
a JSON summary on stdout, or one `error: ...` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from megatron_scale.scale_config import ScaleConfig
from megatron_scale.flags import add_flags, values


def add_scale_arguments(g: argparse._ActionsContainer) -> None:
    """The --scale-* flags, from ScaleConfig's fields (the variant is the caller's flag). Every
    default is None: ScaleConfig's own default applies, unless a SCALE checkpoint given as --load
    records the setting (training takes it from there and refuses a flag that differs)."""
    add_flags(g, ScaleConfig, optional=True)


def scale_config_from_args(args: argparse.Namespace, variant: str) -> ScaleConfig:
    """ScaleConfig from the flags add_scale_arguments declared (None: ScaleConfig's default)."""
    given = {k: v for k, v in values(ScaleConfig, args).items() if v is not None}
    return ScaleConfig(variant=variant, **given)


def name_value(flag: str, value: str = "VALUE") -> Callable[[str], tuple[str, str]]:
    """argparse type of a NAME=VALUE flag (`value` names the right side in the error)."""
    def parse(text: str) -> tuple[str, str]:
        name, sep, right = text.partition("=")
        if not sep or not name or not right:
            raise argparse.ArgumentTypeError(f"{flag}: expected NAME={value}, got {text!r}")
        return name, right
    return parse


def run_tool(work: Callable[[], dict[str, Any]], errors: type[Exception] | tuple[type[Exception], ...]) -> int:
    """Run a tool's work: print its summary as JSON (exit 0), or one error line (exit 2)."""
    try:
        summary = work()
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0

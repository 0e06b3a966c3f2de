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

from megatron_scale.config import ROUTER_STATISTICS, ScaleConfig


def int_list(text: str) -> tuple[int, ...]:
    """'8 9 10' or '8,9,10' -> (8, 9, 10)."""
    return tuple(int(x) for x in text.replace(",", " ").split())


def add_scale_arguments(g: argparse._ActionsContainer) -> None:
    """The --scale-* sizes, initialisation and Route settings (the variant is the caller's flag).

    Every default is None: ScaleConfig's own default applies, unless a SCALE checkpoint given as
    --load records the setting (training takes it from there and refuses a flag that differs)."""
    g.add_argument("--scale-hidden-up", type=int, default=None, help="d' (default d/4)")
    g.add_argument("--scale-heads-up", type=int, default=None, help="h' (default h/4)")
    g.add_argument("--scale-groups-up", type=int, default=None, help="g' (default keeps the GQA ratio)")
    g.add_argument("--scale-ffn-up", type=int, default=None, help="f' (default f/4)")
    g.add_argument("--scale-init", choices=("svd", "normal", "zero"), default=None, help="default svd")
    g.add_argument("--scale-init-std", type=float, default=None, help="default 0.02")
    g.add_argument("--scale-adapt-layers", type=int_list, default=None, help="0-based, e.g. '8 9 10' (default: upper half)")
    g.add_argument("--scale-adapt-modules", type=lambda s: tuple(s.replace(",", " ").split()), default=None,
                   help="default 'qkv proj'")
    g.add_argument("--scale-route-adapt", action="store_true", default=None)
    g.add_argument("--scale-router-tau", type=float, default=None,
                   help="route: the router's default tau, recorded in checkpoints (default: the loaded SCALE "
                   "checkpoint's, else 0.5); evaluation takes an override (--route-tau)")
    g.add_argument("--scale-router-statistic", choices=ROUTER_STATISTICS, default=None,
                   help="route: the router's default statistic (default: the loaded SCALE checkpoint's, else cosine)")
    g.add_argument("--scale-seed", type=int, default=None, help="default 1234")


# ScaleConfig field -> its --scale-* flag's attribute on the parsed arguments
SCALE_FLAGS = {
    "hidden_up": "scale_hidden_up", "heads_up": "scale_heads_up", "groups_up": "scale_groups_up",
    "ffn_up": "scale_ffn_up", "init": "scale_init", "init_std": "scale_init_std",
    "adapt_layers": "scale_adapt_layers", "adapt_modules": "scale_adapt_modules",
    "route_adapt": "scale_route_adapt", "router_tau": "scale_router_tau",
    "router_statistic": "scale_router_statistic", "seed": "scale_seed",
}


def scale_config_from_args(args: argparse.Namespace, variant: str) -> ScaleConfig:
    """ScaleConfig from the flags add_scale_arguments declared (None: ScaleConfig's default)."""
    given = {field: getattr(args, attr) for field, attr in SCALE_FLAGS.items() if getattr(args, attr) is not None}
    return ScaleConfig(variant=variant, **given)


def run_tool(work: Callable[[], dict[str, Any]], errors: type[Exception] | tuple[type[Exception], ...]) -> int:
    """Run a tool's work: print its summary as JSON (exit 0), or one error line (exit 2)."""
    try:
        summary = work()
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0

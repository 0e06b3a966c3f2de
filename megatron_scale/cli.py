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
    """The --scale-* sizes, initialisation and Route settings (the variant is the caller's flag)."""
    g.add_argument("--scale-hidden-up", type=int, default=None, help="d' (default d/4)")
    g.add_argument("--scale-heads-up", type=int, default=None, help="h' (default h/4)")
    g.add_argument("--scale-groups-up", type=int, default=None, help="g' (default keeps the GQA ratio)")
    g.add_argument("--scale-ffn-up", type=int, default=None, help="f' (default f/4)")
    g.add_argument("--scale-init", choices=("svd", "normal", "zero"), default="svd")
    g.add_argument("--scale-init-std", type=float, default=0.02)
    g.add_argument("--scale-adapt-layers", type=int_list, default=None, help="0-based, e.g. '8 9 10'")
    g.add_argument("--scale-adapt-modules", type=lambda s: tuple(s.replace(",", " ").split()), default=("qkv", "proj"))
    g.add_argument("--scale-route-adapt", action="store_true")
    g.add_argument("--scale-router-tau", type=float, default=None,
                   help="route: the router's default tau, recorded in checkpoints (default: the loaded SCALE "
                   "checkpoint's, else 0.5); evaluation takes an override (--route-tau)")
    g.add_argument("--scale-router-statistic", choices=ROUTER_STATISTICS, default=None,
                   help="route: the router's default statistic (default: the loaded SCALE checkpoint's, else cosine)")
    g.add_argument("--scale-seed", type=int, default=1234)


def scale_config_from_args(args: argparse.Namespace, variant: str) -> ScaleConfig:
    """ScaleConfig from the flags add_scale_arguments declared."""
    return ScaleConfig(
        hidden_up=args.scale_hidden_up, heads_up=args.scale_heads_up, groups_up=args.scale_groups_up,
        ffn_up=args.scale_ffn_up, variant=variant, init=args.scale_init,  # type: ignore[arg-type]
        init_std=args.scale_init_std, adapt_layers=args.scale_adapt_layers,
        adapt_modules=args.scale_adapt_modules, route_adapt=args.scale_route_adapt,
        router_tau=0.5 if args.scale_router_tau is None else args.scale_router_tau,
        router_statistic=args.scale_router_statistic or "cosine", seed=args.scale_seed,
    )


def run_tool(work: Callable[[], dict[str, Any]], errors: type[Exception] | tuple[type[Exception], ...]) -> int:
    """Run a tool's work: print its summary as JSON (exit 0), or one error line (exit 2)."""
    try:
        summary = work()
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0

#!/usr/bin/env python3
"""Base megatron-core checkpoint -> SCALE checkpoint (variant, sizes, init), at any TP x PP.

    python tools/upscale_checkpoint.py --load ckpt/base --save ckpt/scale-route \
        --scale-variant route --scale-hidden-up 512 --scale-init svd --scale-seed 1234 \
        --tensor-model-parallel-size 2

Sizes default to a quarter of the base (d/4, h/4, f/4; g' keeps the GQA ratio), or where that is
no whole number of KV groups divisible by TP, the nearest geometry that is (the summary's
`scale_dims` says what was picked). Run as a plain
process it starts the TP x PP ranks itself; under torchrun it uses the ranks it is given.
All the work is in megatron_scale.convert.offline_upscale.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from megatron_scale.cli import add_scale_arguments, run_tool, scale_config_from_args


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", required=True, help="base checkpoint (convert_hf_to_megatron.py output)")
    p.add_argument("--save", required=True, help="SCALE checkpoint directory to create")
    p.add_argument("--model-args", default=None, help="JSON model arguments, if --load records none")
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    g = p.add_argument_group("SCALE (--scale-*)")
    g.add_argument("--scale-variant", choices=("preserve", "adapt", "route"), default="preserve")
    add_scale_arguments(g)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.convert import ConversionError, upscale_checkpoint

    scale = scale_config_from_args(args, args.scale_variant)
    return run_tool(
        lambda: upscale_checkpoint(
            args.load, args.save, scale, tp=args.tensor_model_parallel_size,
            pp=args.pipeline_model_parallel_size, model_args=args.model_args,
        ),
        ConversionError,
    )


if __name__ == "__main__":
    sys.exit(main())

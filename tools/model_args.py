#!/usr/bin/env python3
"""Model arguments for the recipe: a JSON file for --model-args, or the training entry's flags.

    # the JSON that export and upscaling need for a checkpoint made by training:
    python tools/model_args.py --output base/model_args.json -- --num-layers 4 --hidden-size 128 ...
    # the training flags of a converted base checkpoint (one per line):
    python tools/model_args.py --load ckpt/base --train-flags

All the work is in megatron_scale.recipe.model_args.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, train = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", default=None, help="checkpoint that records model_args (converted or upscaled)")
    p.add_argument("--output", default=None, help="write the JSON here (atomically) instead of stdout")
    p.add_argument("--train-flags", action="store_true", help="print the training entry's flags, one per line")
    args = p.parse_args(own)
    if (args.load is None) == (not train):
        p.error("give either --load CHECKPOINT or '-- TRAINING FLAGS'")
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.convert import ConversionError
    from megatron_scale.recipe import model_args as M

    def work() -> None:
        a = M.from_checkpoint(args.load) if args.load else M.from_train_flags(train)
        if args.train_flags:
            print("\n".join(M.train_flags(a)))
            return
        text = json.dumps(a.to_json(), indent=2) + "\n"
        if args.output is None:
            print(text, end="")
            return
        tmp = f"{args.output}.partial"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.output)

    try:
        work()
    except (ConversionError, ValueError, OSError) as e:
        print(f"model_args.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""megatron-core dist checkpoint (any TP/PP; plain Llama or SCALE) -> Hugging Face folder.

    python tools/convert_megatron_to_hf.py --load ckpt/base --save hf/base \
        --tokenizer /models/Llama-3.2-1B --verify
    python tools/convert_megatron_to_hf.py --load ckpt/scale --save hf/scale     # SCALE model:
        # AutoModelForCausalLM.from_pretrained("hf/scale", trust_remote_code=True)
    python tools/convert_megatron_to_hf.py --load ckpt/scale --save hf/base-again --preserve-head-only
    python tools/convert_megatron_to_hf.py --load ckpt/scale --save hf/fused --fused-view   # vLLM / SGLang
        # (their Transformers backends; docs/serving.md): a Llama of the whole width, z_a

A plain checkpoint becomes LlamaForCausalLM; a SCALE one ships its modeling code in the folder.
The folder appears only when complete (written beside it, then renamed); --force replaces an
existing one. All the work is in megatron_scale.convert.to_hf.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from megatron_scale.cli import run_tool


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", required=True, help="megatron-core torch_dist checkpoint directory")
    p.add_argument("--save", required=True, help="Hugging Face folder to write")
    p.add_argument("--force", action="store_true", help="replace --save if it exists")
    p.add_argument("--tokenizer", default=None, help="folder whose tokenizer files are copied into --save")
    p.add_argument("--verify", action="store_true", help="compare both models' logits on sample tokens")
    p.add_argument("--verify-tolerance", type=float, default=None,
                   help="max |logit difference| (default: 6.1e-5 x max(1, max |logit|); both models run in fp32 "
                   "on the export's weights)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="dtype of the exported weights (default: the checkpoint's)")
    p.add_argument("--model-args", default=None,
                   help="JSON file of model arguments, for checkpoints that do not record them")
    p.add_argument("--preserve-head-only", action="store_true",
                   help="SCALE checkpoint: export the preservation head alone as a plain LlamaForCausalLM")
    p.add_argument("--fused-view", action="store_true",
                   help="SCALE-Preserve / Adapt checkpoint: export the adaptation head z_a as a Llama of the whole "
                        "width (full block weights, split norms) that vLLM's and SGLang's Transformers backends load; "
                        "refused for Route, a gate or per-unit routing, which need SCALE's own head")
    p.add_argument("--route-tau", type=float, default=None,
                   help="SCALE-Route: config.json's scale_router_tau (default: the checkpoint's); --verify uses it")
    p.add_argument("--route-statistic", choices=("cosine", "centered-cosine", "max-prob", "certainty"), default=None,
                   help="SCALE-Route: config.json's scale_router_statistic (default: the checkpoint's)")
    p.add_argument("--route-direction", choices=("above", "below"), default=None,
                   help="SCALE-Route: config.json's scale_router_direction: keep z_p where the statistic is above "
                        "(>=) or below (<=) tau (default: the checkpoint's)")
    p.add_argument("--route-unit", choices=("token", "char", "word"), default=None,
                   help="SCALE-Route: config.json's scale_router_unit: one decision per token, or per UTF-8 character "
                        "or whitespace word (the unit's first token decides; needs --tokenizer, a byte-level BPE) "
                        "(default: the checkpoint's)")
    p.add_argument("--max-shard-size-gb", type=float, default=5.0)
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.convert import ConversionError, convert_megatron_to_hf
    from megatron_scale.scale_config import RouterOverride

    if args.max_shard_size_gb <= 0:
        print(f"error: --max-shard-size-gb {args.max_shard_size_gb}: must be positive", file=sys.stderr)
        return 2
    return run_tool(
        lambda: convert_megatron_to_hf(
            args.load, args.save, force=args.force, tokenizer=args.tokenizer, verify=args.verify,
            tolerance=args.verify_tolerance, dtype=args.dtype, model_args=args.model_args,
            preserve_head_only=args.preserve_head_only, fused_view=args.fused_view,
            route=RouterOverride(tau=args.route_tau, statistic=args.route_statistic, direction=args.route_direction,
                                 unit=args.route_unit),
            max_shard_bytes=int(args.max_shard_size_gb * 2**30), progress=not args.no_progress,
        ),
        ConversionError,
    )


if __name__ == "__main__":
    sys.exit(main())

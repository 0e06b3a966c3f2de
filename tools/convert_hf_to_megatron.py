#!/usr/bin/env python3
"""Hugging Face Llama folder (config.json + safetensors) -> megatron-core dist checkpoint.

    python tools/convert_hf_to_megatron.py --load /models/Llama-3.2-1B --save ckpt/base \
        --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1

Run as a plain process it starts the TP x PP ranks itself (gloo on CPU, NCCL on enough GPUs);
under torchrun it uses the ranks it is given. The checkpoint records the model arguments
(layers, sizes, RoPE, norm epsilon, tied embeddings) for training, upscaling and export.
All the work is in megatron_scale.convert.to_megatron.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from megatron_scale.cli import run_tool


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", required=True, help="Hugging Face folder: config.json + *.safetensors")
    p.add_argument("--save", required=True, help="checkpoint directory to create (must not exist)")
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="weights' dtype in the checkpoint (default: config.json's)")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.convert import ConversionError, convert_hf_to_megatron

    return run_tool(
        lambda: convert_hf_to_megatron(
            args.load, args.save, tp=args.tensor_model_parallel_size, pp=args.pipeline_model_parallel_size,
            dtype=args.dtype, progress=not args.no_progress,
        ),
        ConversionError,
    )


if __name__ == "__main__":
    sys.exit(main())

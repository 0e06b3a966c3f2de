#!/usr/bin/env python3
"""The offline GPU kit's command line: build it on a networked machine, check and install it on
the GPU node (docs/gpu.md). Where the project is not installed (the node), run
`python3 -m megatron_scale.gpukit` from the checkout's root instead; both are
megatron_scale/gpukit/cli.py.

    python tools/gpu_kit.py build --out DIR [--limit-mib 55]
    python tools/gpu_kit.py check KIT
    python tools/gpu_kit.py install KIT [--work DIR] [--jobs 16]
"""

import sys

from megatron_scale.gpukit.cli import main

if __name__ == "__main__":
    sys.exit(main())

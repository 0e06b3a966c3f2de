"""python -m megatron_scale.gpukit: the kit's command line (cli.py)."""

import sys

from megatron_scale.gpukit.cli import main

sys.exit(main())

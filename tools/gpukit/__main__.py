"""python3 tools/gpukit: the kit's command line (cli.py). Standard library only; the folder
above this one goes on sys.path so the modules import as the package `gpukit`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpukit.cli import main  # noqa: E402

sys.exit(main())

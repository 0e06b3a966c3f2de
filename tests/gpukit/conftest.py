"""tools/gpukit is run as `python3 tools/gpukit` and is no installed package: its tests import it
as `gpukit` from tools/."""

import sys
from pathlib import Path

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

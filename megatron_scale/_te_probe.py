"""Whether Transformer Engine imports here, and if not, why: one probe for the whole package.

A Transformer Engine that is installed but broken (its torch extension missing or built for
another torch, cuDNN or libnccl not found, no NVIDIA driver) raises FileNotFoundError,
AssertionError, RuntimeError or OSError on import, not only ImportError. megatron-core imports TE
at module import and catches only ImportError, so such a TE would break every megatron-core
import. `hide_broken_te` (run by _mcore.py before it imports megatron.core) makes such a TE look
absent to megatron-core, which then takes its no-TE paths; the reason stays in `te_status()`, and
every flag and test that needs TE reports it (model/layers/te.py, tests/conftest.py).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys


@functools.cache
def te_status() -> tuple[bool, str]:
    """(transformer_engine.pytorch imports, one line saying so or why not). The first call imports
    TE when it is installed (megatron-core would import it anyway); the answer is kept."""
    try:
        installed = importlib.util.find_spec("transformer_engine") is not None  # imports nothing
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return False, "Transformer Engine is not installed (no transformer_engine package)"
    try:
        importlib.import_module("transformer_engine.pytorch")
    except Exception as e:  # noqa: BLE001 - any reason TE gives, reported in one line
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return False, f"Transformer Engine is installed but does not import: {type(e).__name__}: {first}"
    return True, "transformer_engine.pytorch imports"


def hide_broken_te() -> None:
    """Make an installed but broken TE unimportable (ImportError), so megatron-core skips it."""
    if te_status()[0] or importlib.util.find_spec("transformer_engine") is None:
        return
    for name in [n for n in sys.modules if n == "transformer_engine" or n.startswith("transformer_engine.")]:
        del sys.modules[name]
    sys.modules["transformer_engine"] = None  # type: ignore[assignment]  # import raises ImportError

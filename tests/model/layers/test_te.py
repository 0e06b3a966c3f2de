"""The Transformer Engine entry (megatron_scale/model/layers/te.py, _te_probe.py): without TE, or with a TE that
fails to import for any reason, every flag that needs it is refused by name with the reason in one
line, its tests skip with that reason, and megatron-core and the package still import; with TE the
module is handed out."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from megatron_scale.model.layers import te
from tests.conftest import requires_te

no_te_installed = pytest.mark.skipif(find_spec("transformer_engine") is not None,
                                     reason="checks a machine without Transformer Engine installed")


def test_without_te_the_flag_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(te, "te_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"--fp8-format needs NVIDIA Transformer Engine.*--transformer-impl local"):
        te.require_te("--fp8-format")
    with pytest.raises(RuntimeError, match=r"--transformer-impl transformer_engine needs NVIDIA Transformer Engine"):
        te.te_pytorch()


@no_te_installed
def test_package_imports_without_te() -> None:
    code = (
        "import sys, megatron_scale.model.layers.te, megatron_scale.model.layers.te_linear, megatron_scale.model.layers.spec, "
        "megatron_scale.methods.load; assert 'transformer_engine' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fp8_flags_become_megatron_config() -> None:
    assert te.fp8_config(None, None) == {}
    assert te.fp8_config("hybrid", None) == {"fp8": "hybrid", "fp8_recipe": "delayed"}
    assert te.fp8_config("e4m3", "tensorwise") == {"fp8": "e4m3", "fp8_recipe": "tensorwise"}


@requires_te
def test_with_te_the_module_is_handed_out() -> None:
    te.require_te("--transformer-impl transformer_engine")
    assert te.te_pytorch().__name__ == "transformer_engine.pytorch"


BROKEN = {  # what a half-installed TE raises on import, each a stand-in package on PYTHONPATH
    "FileNotFoundError": {"__init__.py": "raise FileNotFoundError('libtransformer_engine.so: no such file')\n"},
    "AssertionError": {"__init__.py": "", "pytorch/__init__.py": "assert False, 'torch extension built for 2.10'\n"},
    "ModuleNotFoundError": {"__init__.py": "import pydantic_is_not_here\n"},
}
PROBE = """
import sys
import megatron_scale._mcore as mc                   # megatron-core imports despite the broken TE
from megatron.core.optimizer import USING_PYTORCH_OPTIMIZER
from megatron_scale.model.layers import te
from tests.conftest import requires_te
assert sys.modules["transformer_engine"] is None and USING_PYTORCH_OPTIMIZER
assert not te.te_available()
try:
    te.require_te("--fp8-format")
except RuntimeError as e:
    print("REQUIRE", e)
def test_x(): pass
mark = requires_te(test_x).pytestmark
print("SKIP", [m.kwargs["reason"] for m in mark if m.name == "skipif"][0])
"""


@pytest.mark.parametrize("error", sorted(BROKEN))
def test_a_broken_te_is_one_line_why_and_megatron_core_still_imports(tmp_path: Path, error: str) -> None:
    root = Path(__file__).resolve().parents[3]
    for rel, text in BROKEN[error].items():
        f = tmp_path / "transformer_engine" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    env = {"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=root,
                       check=False, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.startswith(("REQUIRE", "SKIP")))
    why = f"Transformer Engine is installed but does not import: {error}: "
    assert why in lines["REQUIRE"] and lines["REQUIRE"].startswith("--fp8-format needs"), lines
    assert lines["SKIP"].startswith(f"needs NVIDIA Transformer Engine: {why}"), lines


@no_te_installed
def test_without_te_the_reason_says_not_installed() -> None:
    assert te.te_reason() == "Transformer Engine is not installed (no transformer_engine package)"

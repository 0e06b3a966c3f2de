"""The Transformer Engine entry (megatron_scale/model/te.py): without TE every flag that needs it
is refused by name, and the package imports without it; with TE the module is handed out."""

from __future__ import annotations

import subprocess
import sys

import pytest

from megatron_scale.model import te
from tests.conftest import requires_te


def test_without_te_the_flag_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(te, "te_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"--fp8-format needs NVIDIA Transformer Engine.*--transformer-impl local"):
        te.require_te("--fp8-format")
    with pytest.raises(RuntimeError, match=r"--transformer-impl transformer_engine needs NVIDIA Transformer Engine"):
        te.te_pytorch()


def test_package_imports_without_te() -> None:
    code = (
        "import sys, megatron_scale.model.te, megatron_scale.model.te_linear, megatron_scale.model.spec, "
        "megatron_scale.training.model; assert 'transformer_engine' not in sys.modules"
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

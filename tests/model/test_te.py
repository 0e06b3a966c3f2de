"""The Transformer Engine entry (megatron_scale/model/te.py): every flag that needs TE is refused
by name, with or without TE installed, and the package imports without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from megatron_scale.model import te


def test_without_te_the_flag_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(te, "te_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"--fp8-format needs NVIDIA Transformer Engine.*--transformer-impl local"):
        te.require_te("--fp8-format")


def test_package_imports_without_te() -> None:
    code = "import sys, megatron_scale.model.te, megatron_scale.model.linear; assert 'transformer_engine' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.te
@pytest.mark.skipif(not te.te_available(), reason="needs NVIDIA Transformer Engine (transformer_engine.pytorch)")
def test_with_te_the_scale_layers_are_refused_not_faked() -> None:
    with pytest.raises(NotImplementedError, match="--transformer-impl transformer_engine: SCALE's Transformer Engine"):
        te.require_te("--transformer-impl transformer_engine")

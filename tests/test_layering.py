"""House rules that keep the codebase changeable, checked on the source itself:
- model code (megatron_scale.model, .upscale) imports nothing from training, data or tools;
- every megatron.core import goes through megatron_scale/_mcore.py;
- only megatron_scale/distributed.py knows about the CPU backend;
- importing the package patches nothing (no import-time side effects on torch.cuda)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "megatron_scale"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _sources() -> list[Path]:
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 10
    return files


def test_megatron_core_only_through_the_gateway() -> None:
    offenders = [
        str(p.relative_to(PKG)) for p in _sources()
        if p.name != "_mcore.py" and any(n == "megatron.core" or n.startswith("megatron.core.") for n in _imports(p))
    ]
    assert offenders == []


def test_model_code_never_imports_training_code() -> None:
    forbidden = ("megatron_scale.training", "megatron_scale.train", "megatron_scale.data", "tools")
    model_files = [p for p in _sources() if p.parent.name in ("model", "upscale")]
    assert model_files
    offenders = {
        str(p.relative_to(PKG)): sorted(n for n in _imports(p) if n.startswith(forbidden))
        for p in model_files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_distributed_knows_the_cpu_backend() -> None:
    users = sorted(
        str(p.relative_to(PKG)) for p in _sources()
        if p.name != "cpu_backend.py" and any("cpu_backend" in n for n in _imports(p))
    )
    assert users == ["distributed.py"]


def test_import_has_no_side_effects() -> None:
    code = (
        "import torch; before = (torch.cuda.current_device, torch.cuda.synchronize);"
        "import megatron_scale.model.builder, megatron_scale.upscale, megatron_scale.checkpoint,"
        " megatron_scale.distributed, megatron_scale.cpu_backend;"
        "import sys; assert (torch.cuda.current_device, torch.cuda.synchronize) == before;"
        "bad = [m for m in sys.modules if m.startswith(('megatron_scale.training', 'megatron_scale.data'))];"
        "assert not bad, bad; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]

"""tools/gpu_check.sh --kit on a machine without CUDA: the kit is checked against this machine
first (a corrupted file or a mismatched torch never gets as far as the GPU), and only a kit that
passed is refused for want of CUDA; with a package index configured at a local port that records
connections, nothing contacts it. Its --kit errors name the flag."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpukit import node
from tests.gpukit._kit import Listener
from tests.gpukit.test_node import ROLES, _kit

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def _gpu_check(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, bool]:
    index = Listener()
    env = {**os.environ, **index.env(), "PYTHON": sys.executable}
    try:
        r = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), *args, "--out", str(tmp / "out"),
                            "--skip-bench"], env=env, cwd=tmp, capture_output=True, text=True, timeout=300, check=False)
        return r, index.contacted()
    finally:
        index.close()


@functools.cache
def _facts() -> dict:
    return node.node_facts()


def _this_machines_kit(tmp: Path, **built: str) -> Path:
    kit = _kit(tmp)
    manifest = json.loads((kit / node.KIT_FILE).read_text())
    facts = _facts()
    manifest["built_against"] = {"python": facts["python"], "torch": facts["torch"], "cuda": facts["cuda"], **built}
    (kit / node.KIT_FILE).write_text(json.dumps(manifest))
    return kit


def test_a_good_kit_passes_its_checks_and_then_no_cuda_is_refused(tmp_path: Path) -> None:
    r, contacted = _gpu_check(tmp_path, "--kit", str(_this_machines_kit(tmp_path)))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "every sha256 matches" in r.stdout and "gpukit: the kit fits this node" in r.stdout, r.stdout
    assert "gpu_check.sh: no CUDA device visible" in r.stderr, r.stderr
    assert not contacted, "something contacted the configured package index"
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists(), "nothing written before the GPU"


def test_a_corrupted_file_or_another_torch_is_named_before_any_gpu_check(tmp_path: Path) -> None:
    kit = _this_machines_kit(tmp_path)
    core = kit / next(n for n, r in ROLES.items() if r == "te_core")
    core.write_bytes(core.read_bytes()[:-1] + b"\0")
    r, contacted = _gpu_check(tmp_path, "--kit", str(kit))
    assert r.returncode == 1 and f"checksum mismatch: {core}" in r.stderr, r.stderr
    assert "no CUDA device visible" not in r.stderr and not contacted
    other = tmp_path / "other"
    other.mkdir()
    r, _ = _gpu_check(other, "--kit", str(_this_machines_kit(other, torch="2.11.0+cu130-other")))
    assert r.returncode == 1 and "torch: the prebuilt extension is for torch 2.11.0+cu130-other" in r.stderr, r.stderr
    assert "no CUDA device visible" not in r.stderr


def test_flag_errors_name_the_flag(tmp_path: Path) -> None:
    r, _ = _gpu_check(tmp_path, "--kit", str(tmp_path / "nowhere"))
    assert r.returncode == 1 and "nowhere/kit.json not found" in r.stderr, r.stderr
    r, _ = _gpu_check(tmp_path, "--kit", str(tmp_path), "--skip-install")
    assert r.returncode == 2 and "--kit installs from the kit; it cannot be combined" in r.stderr, r.stderr

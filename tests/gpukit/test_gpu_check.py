"""tools/gpu_check.sh --kit on a machine without CUDA: the kit and the build tools are checked
first, each problem named (a corrupted or missing part never gets as far as the GPU), and only a
kit that passed is refused for want of CUDA; with a package index configured at a local port that
records connections, nothing contacts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.gpukit._kit import TE_CORE, Listener, fake_headers, standin_kit

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def _gpu_check(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, bool]:
    index = Listener()
    env = {**os.environ, **index.env(), "PYTHON": sys.executable, "CXX": "/bin/true",  # any compiler path will do
           "CPATH": str(fake_headers(tmp / "h"))}
    try:
        r = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), *args, "--out", str(tmp / "out"),
                            "--skip-bench"], env=env, cwd=tmp, capture_output=True, text=True, timeout=300, check=False)
        return r, index.contacted()
    finally:
        index.close()


def test_a_good_kit_passes_its_checks_and_then_no_cuda_is_refused(tmp_path: Path) -> None:
    kit, _, _ = standin_kit(tmp_path)
    r, contacted = _gpu_check(tmp_path, "--kit", str(kit))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "gpu_kit: kit checks passed" in r.stdout and "every sha256 matches" in r.stdout, r.stdout
    assert "gpu_check.sh: no CUDA device visible" in r.stderr, r.stderr
    assert not contacted, "something contacted the configured package index"


def test_a_corrupted_part_is_named_before_any_gpu_check(tmp_path: Path) -> None:
    kit, manifest, _ = standin_kit(tmp_path)
    part = next(e for e in manifest["files"] if e["name"] == TE_CORE)["parts"][3]
    path = kit / part["folder"] / part["name"]
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    r, contacted = _gpu_check(tmp_path, "--kit", str(kit))
    assert r.returncode == 1 and f"checksum mismatch: {path} is not {part['name']}" in r.stderr, r.stderr
    assert "CUDA" not in r.stdout + r.stderr and not contacted


def test_a_missing_part_is_named_before_any_gpu_check(tmp_path: Path) -> None:
    kit, manifest, _ = standin_kit(tmp_path)
    part = next(e for e in manifest["files"] if e["name"] == TE_CORE)["parts"][0]
    (kit / part["folder"] / part["name"]).unlink()
    r, _ = _gpu_check(tmp_path, "--kit", str(kit))
    assert r.returncode == 1 and f"missing part {part['name']} (from folder {part['folder']})" in r.stderr, r.stderr
    assert "CUDA" not in r.stdout + r.stderr


def test_kit_flag_errors_name_the_flag(tmp_path: Path) -> None:
    r, _ = _gpu_check(tmp_path, "--kit", str(tmp_path / "nowhere"))
    assert r.returncode == 1 and "--kit" in r.stderr and "is not a folder" in r.stderr, r.stderr
    r, _ = _gpu_check(tmp_path, "--kit", str(tmp_path), "--skip-install")
    assert r.returncode == 2 and "--kit installs from the kit; it cannot be combined" in r.stderr, r.stderr

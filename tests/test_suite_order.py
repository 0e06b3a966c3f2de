"""tests/conftest.py runs the slowest files first: each name it lists is a test file that exists, so
a moved file cannot silently drop back to the end of the run."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_the_slow_first_files_exist() -> None:
    missing = [p for p in SLOW_FIRST if not (ROOT / p).is_file()]
    assert not missing, f"tests/conftest.py SLOW_FIRST names files that do not exist: {missing}"

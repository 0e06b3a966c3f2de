"""tests/conftest.py runs the slowest files first: each name it lists is a test file that exists, so
a moved file cannot silently drop back to the end of the run."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_the_slow_first_files_exist() -> None:
    missing = [p for p in SLOW_FIRST if not (ROOT / p).is_file()]
    assert not missing, f"tests/conftest.py SLOW_FIRST names files that do not exist: {missing}"


def test_the_long_tier_names_tests_that_exist() -> None:
    """Each LONG entry is a file that exists, or a test function defined in one: a renamed test
    cannot silently leave the long tier and come back into CI's time."""
    from tests.conftest import LONG

    bad = []
    for name in LONG:
        path, _, test = name.partition("::")
        if not (ROOT / path).is_file() or (test and f"def {test}(" not in (ROOT / path).read_text()):
            bad.append(name)
    assert not bad, f"tests/conftest.py LONG names tests that do not exist: {bad}"

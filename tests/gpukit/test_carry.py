"""tools/gpukit/carry.py on a made-up checkout: the travelling tree is tracked files plus untracked
files git does not ignore (ignored ones travel only when carried), and a call over the limit is
refused with the tree's largest folder named."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpukit.carry import check_carry, tree_sizes
from gpukit.pack import MIB, KitError


def _checkout(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("kit/\n")
    (root / "results").mkdir()
    (root / "results" / "big.json").write_bytes(b"x" * (3 * MIB))
    (root / "code.py").write_bytes(b"y" * 1000)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    (root / "notes.md").write_bytes(b"z" * 500)  # untracked, not ignored: it travels
    (root / "kit").mkdir()
    (root / "kit" / "part").write_bytes(b"k" * (2 * MIB))  # ignored: only when carried
    return root


def test_the_tree_is_tracked_and_unignored_files_and_the_carried_paths_add(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "repo")
    sizes = tree_sizes(root)
    assert sizes == {"results": 3 * MIB, "code.py": 1000, "notes.md": 500, ".gitignore": 5}, sizes
    lines = check_carry(root, [Path("kit")], limit=6 * MIB)
    assert lines[1].startswith("kit ") and "2.0 MiB" in lines[1] and lines[-1].startswith("total    5.0 MiB of 6")


def test_a_call_over_the_limit_names_the_largest_folder(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "repo")
    with pytest.raises(KitError, match=r"over by 1\.0 MiB; the tree's largest: results 3\.0 MiB"):
        check_carry(root, [Path("kit")], limit=4 * MIB)
    (root / "results" / "big.json").unlink()  # moved aside for the call: a tracked file not on disk stays behind
    assert check_carry(root, [Path("kit")], limit=4 * MIB)[-1].startswith("total    2.0 MiB")
    with pytest.raises(KitError, match="carried but missing: nope"):
        check_carry(root, [Path("nope")])

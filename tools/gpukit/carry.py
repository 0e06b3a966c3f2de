"""What one GPU call carries, measured before the call: the working tree that travels (tracked
files on disk and untracked files git does not ignore) plus each carried path, against the 64 MiB
a call may carry. A kit folder sized for a small tree stops fitting once the tree grows (the
science kit's kit-01 is 52.5 MiB; with results/ the tree was 34.7 MiB on 2026-12-04), so the
session learns it here, at no device time, with the largest top-level folders named.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpukit.pack import MIB, KitError

CALL_LIMIT = 64 * MIB


def _files(root: Path, *args: str) -> list[Path]:
    r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", *args], capture_output=True, check=False)
    if r.returncode != 0:
        raise KitError(f"{root}: not a git checkout ({r.stderr.decode(errors='replace').strip()[:200]})")
    return [root / n for n in r.stdout.decode().split("\0") if n]


def _size(path: Path) -> int:
    if path.is_symlink() or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def tree_sizes(root: Path) -> dict[str, int]:
    """Bytes of the travelling tree per top-level entry (tracked files that exist, and untracked
    files that git does not ignore)."""
    sizes: dict[str, int] = {}
    for f in {*_files(root), *_files(root, "--others", "--exclude-standard")}:
        if f.is_file() and not f.is_symlink():
            top = f.relative_to(root).parts[0]
            sizes[top] = sizes.get(top, 0) + f.stat().st_size
    return sizes


def check_carry(root: Path, carried: list[Path], limit: int = CALL_LIMIT) -> list[str]:
    """The call's size line by line; KitError naming the largest top-level folders when over."""
    tree = tree_sizes(root)
    missing = [str(p) for p in carried if not (root / p).exists()]
    if missing:
        raise KitError(f"carried but missing: {', '.join(missing)}")
    paths = {str(p): _size(root / p) for p in carried}
    total = sum(tree.values()) + sum(paths.values())
    lines = [f"tree {sum(tree.values()) / MIB:6.1f} MiB",
             *(f"{p} {s / MIB:6.1f} MiB" for p, s in paths.items()),
             f"total {total / MIB:6.1f} MiB of {limit / MIB:.0f}"]
    if total > limit:
        big = sorted(tree.items(), key=lambda kv: -kv[1])[:3]
        raise KitError("\n".join([*lines, f"over by {(total - limit) / MIB:.1f} MiB; the tree's largest: "
                                  + ", ".join(f"{k} {v / MIB:.1f} MiB" for k, v in big)
                                  + " (move one aside for the calls: docs/gpu.md)"]))
    return lines

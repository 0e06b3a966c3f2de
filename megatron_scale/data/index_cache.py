"""megatron-core's dataset index cache, checked before it is trusted.

On a run's first start megatron-core's GPTDataset writes, for each split of each dataset, a
description and three index arrays into its cache folder (`<prefix>/cache/GPTDataset_indices/`,
or --data-cache-path): `<hash>-GPTDataset-<split>-description.txt`, then `...-document_index.npy`,
`...-sample_index.npy`, `...-shuffle_index.npy`, in place (numpy.save). A later run counts the
cache as built when the four files exist. A kill, a full disk or a crash of the machine during
those writes leaves a truncated array that the next run would memory-map and read past.

`check_index_cache(folder)` reads each array's .npy header (a few hundred bytes) and compares the
file's size with what the header's shape and dtype need; a group with a truncated, unreadable or
missing member loses all its files, so megatron-core builds it again, and says so in one line.
Run on rank 0 before megatron-core's builder (which builds on rank 0, then lets the others read).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ARRAYS = ("document_index", "sample_index", "shuffle_index")
DESCRIPTION = "description.txt"


def _whole(path: Path) -> str | None:
    """None when the .npy file is as long as its header says, else why not."""
    try:
        with open(path, "rb") as f:
            fmt = np.lib.format
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(fmt.read_magic(f))
            if read is None:
                return "an .npy format version this check does not know"
            shape, _fortran, dtype = read(f)
            if dtype.hasobject:
                return "holds Python objects"
            need = f.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    except (OSError, ValueError, EOFError) as e:
        return f"unreadable header ({e})"
    size = path.stat().st_size
    return None if size == need else f"{size} bytes, its header needs {need}"


def check_index_cache(folder: str | os.PathLike[str],
                      say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> list[str]:
    """Remove every incomplete group of cached indices under `folder`; returns the groups removed."""
    root = Path(folder)
    if not root.is_dir():
        return []
    groups = {p.name[: -len(DESCRIPTION) - 1] for p in root.glob(f"*-{DESCRIPTION}")}
    groups |= {p.name.rsplit("-", 1)[0] for p in root.glob("*.npy")}
    removed = []
    for group in sorted(groups):
        files = [root / f"{group}-{DESCRIPTION}", *(root / f"{group}-{a}.npy" for a in ARRAYS)]
        missing = [f.name for f in files if not f.is_file()]
        why = f"{missing[0]} is missing" if missing else next(
            (f"{f.name}: {w}" for f in files[1:] if (w := _whole(f)) is not None), None)
        if why is None:
            continue
        for f in files:
            f.unlink(missing_ok=True)
        removed.append(group)
        say(f"dataset index cache {root}/{group}-*: {why} (a run stopped while writing it?); rebuilding it")
    return removed


def cache_folders(prefixes: list[str], path_to_cache: str | None) -> list[Path]:
    """Where megatron-core's GPTDataset keeps the indices of these datasets."""
    if path_to_cache:
        return [Path(path_to_cache)]
    return [Path(p) / "cache" / "GPTDataset_indices" for p in prefixes]

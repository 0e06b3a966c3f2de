"""The networked side: download what contents.py names for the node's platform (CPython 3.12,
manylinux x86-64), whatever this machine runs.

Wheels come through `pip download --no-deps --only-binary=:all: --platform ...`. TE's PyTorch extension is a source
distribution whose setup.py imports torch, so pip cannot download it without building its
metadata; its file is taken from the package index's JSON page (PEP 691) and checked against the
sha256 the index lists.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

from gpukit import contents as c
from gpukit.pack import KitError, sha256

INDEX = "https://pypi.org/simple"


def pip_download(specs: list[str], dest: Path, *, deps: bool = False, python: str = sys.executable) -> None:
    platforms = [a for p in c.PLATFORMS for a in ("--platform", p)]
    argv = [python, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", c.PYTHON,
            "--implementation", "cp", *platforms, "-d", str(dest), *([] if deps else ["--no-deps"]), *specs]
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise KitError(f"pip download {' '.join(specs)} failed: {r.stderr.strip().splitlines()[-1:]}")


def download_sdist(name: str, version: str, dest: Path, index: str = INDEX) -> Path:
    """The sdist `name`-`version` from the index's JSON page, sha256-checked."""
    url = f"{index.rstrip('/')}/{name}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        page: dict[str, Any] = json.load(r)
    want = f"{name.replace('-', '_')}-{version}.tar.gz"
    files = [f for f in page.get("files", []) if f["filename"] == want]
    if not files:
        raise KitError(f"{url} lists no {want}")
    path = dest / want
    urllib.request.urlretrieve(files[0]["url"], path)
    if sha256(path) != files[0]["hashes"]["sha256"]:
        raise KitError(f"{want}: sha256 differs from the one {url} lists")
    return path


def python_include(dest: Path, python: str | None = None) -> Path | None:
    """A tar of CPython 3.12's include folder (Python.h), from this Python if it is 3.12 or from
    `python`; None when neither is 3.12."""
    if python is not None:
        inc = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    elif sys.version_info[:2] == (3, 12):
        inc = sysconfig.get_paths()["include"]
    else:
        return None
    if not (Path(inc) / "Python.h").is_file():
        return None
    path = dest / c.PYTHON_INCLUDE
    with tarfile.open(path, "w:gz") as t:
        t.add(inc, arcname="python3.12")
    return path


def one(folder: Path, spec: str) -> Path:
    """The one wheel in `folder` that `spec` (name==version, the version may end in .*) names."""
    name, version = spec.split("==")
    hits = sorted(folder.glob(f"{name.replace('-', '_')}-{version.replace('.*', '.')}*.whl"))
    if len(hits) != 1:
        raise KitError(f"{folder}: expected one wheel for {spec}, found {[h.name for h in hits]}")
    return hits[0]

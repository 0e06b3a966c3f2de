"""The kit on disk: files split into parts and packed into folders of at most `limit` bytes.

    OUT/kit-01/  kit.json  SHA256SUMS  <parts and small files>
    OUT/kit-02/  transformer_engine_cu13-...whl.part1 ...

kit.json names every file with its size and sha256 and, for each of its parts (one part for a
file that fits), the part's name, folder, size and sha256. SHA256SUMS lists every part in the
`sha256sum -c` format, so the folders can also be checked by hand. On the node the folders are
copied into one place (as folders, or their contents flat); `verify` names the first missing or
corrupted part and `reassemble` joins the parts and checks each whole file against kit.json.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

MANIFEST = "kit.json"
SUMS = "SHA256SUMS"
MIB = 1024 * 1024
DEFAULT_LIMIT = 55 * MIB
_SLACK = 256 * 1024  # left free in every folder: a transfer that archives it adds headers
_RESERVE = 256 * 1024  # and in kit-01 room for kit.json and SHA256SUMS
FORMAT = 1


class KitError(RuntimeError):
    """One line naming the missing or bad piece."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(4 * MIB), b""):
            h.update(block)
    return h.hexdigest()


def _split(src: Path, dest: Path, chunk: int) -> list[Path]:
    """`src` into dest/<name>.part0, .part1, ... of `chunk` bytes (the last shorter)."""
    parts: list[Path] = []
    with src.open("rb") as f:
        while block := f.read(chunk):
            part = dest / f"{src.name}.part{len(parts)}"
            part.write_bytes(block)
            parts.append(part)
    return parts


def pack(files: list[Path], out: Path, meta: dict[str, Any], limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """Lay `files` out under `out` (which must not exist) in folders kit-NN of at most `limit`
    bytes each, splitting the files larger than a folder; write kit.json (with `meta`) and
    SHA256SUMS into kit-01. Returns the manifest."""
    if limit < 4 * (_SLACK + _RESERVE):
        raise KitError(f"--limit-mib: {limit} bytes is too small for a kit folder")
    if out.exists():
        raise KitError(f"--out {out} already exists; give a new folder")
    chunk = limit - _SLACK - _RESERVE
    staging = out / ".parts"
    staging.mkdir(parents=True)
    entries: list[dict[str, Any]] = []
    pieces: list[tuple[Path, dict[str, Any]]] = []
    for src in sorted(files, key=lambda p: p.name):
        entry = {"name": src.name, "size": src.stat().st_size, "sha256": sha256(src), "parts": []}
        split = _split(src, staging, chunk) if entry["size"] > chunk else [src]
        for p in split:
            part = {"name": p.name, "size": p.stat().st_size, "sha256": entry["sha256"] if p is src else sha256(p)}
            entry["parts"].append(part)
            pieces.append((p, part))
        entries.append(entry)
    # first fit, largest first; kit-01 keeps _RESERVE more free for the manifest
    free: list[int] = []
    for path, part in sorted(pieces, key=lambda x: -x[1]["size"]):
        i = next((i for i, f in enumerate(free) if f >= part["size"]), len(free))
        if i == len(free):
            free.append(limit - _SLACK - (_RESERVE if i == 0 else 0))
        free[i] -= part["size"]
        part["folder"] = f"kit-{i + 1:02d}"
        folder = out / part["folder"]
        folder.mkdir(exist_ok=True)
        (shutil.move if path.parent == staging else shutil.copy2)(path, folder / part["name"])
    staging.rmdir()
    first = out / "kit-01"
    first.mkdir(exist_ok=True)
    manifest = {"format": FORMAT, "limit": limit, **meta, "files": entries}
    (first / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    (first / SUMS).write_text("".join(f"{p['sha256']}  {p['name']}\n" for e in entries for p in e["parts"]))
    return manifest


def _find(kit: Path, name: str) -> Path | None:
    """`name` in the kit folder itself or one folder down (kit-NN kept as folders)."""
    for candidate in (kit / name, *sorted(kit.glob(f"*/{name}"))):
        if candidate.is_file():
            return candidate
    return None


def load_manifest(kit: Path) -> dict[str, Any]:
    if not kit.is_dir():
        raise KitError(f"--kit {kit} is not a folder")
    path = _find(kit, MANIFEST)
    if path is None:
        raise KitError(f"{MANIFEST} not found in {kit} (it is in the kit's first folder, kit-01: copy that in)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise KitError(f"{path}: kit format {manifest.get('format')!r}, this checkout reads format {FORMAT}")
    return manifest


def verify(kit: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Every part present with its size and sha256: part name -> path. KitError names the first
    missing or corrupted part and the folder it came in."""
    found: dict[str, Path] = {}
    for entry in manifest["files"]:
        for part in entry["parts"]:
            path = _find(kit, part["name"])
            where = f"{part['name']} (from folder {part['folder']})"
            if path is None:
                raise KitError(f"missing part {where}: copy folder {part['folder']} into {kit}")
            if path.stat().st_size != part["size"] or sha256(path) != part["sha256"]:
                raise KitError(f"checksum mismatch: {path} is not {where} as packed; copy that folder again")
            found[part["name"]] = path
    return found


def reassemble(kit: Path, manifest: dict[str, Any], work: Path) -> dict[str, Path]:
    """Each file whole in `work` (parts joined; a one-part file is copied), checked against its
    sha256: file name -> path."""
    parts = verify(kit, manifest)
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for entry in manifest["files"]:
        dest = work / entry["name"]
        with dest.open("wb") as f:
            for part in entry["parts"]:
                with parts[part["name"]].open("rb") as src:
                    shutil.copyfileobj(src, f, 4 * MIB)
        if sha256(dest) != entry["sha256"]:
            raise KitError(f"checksum mismatch: {entry['name']} joined from {len(entry['parts'])} parts")
        out[entry["name"]] = dest
    return out


def folder_sizes(out: Path) -> dict[str, int]:
    """Bytes in each kit-NN folder."""
    return {d.name: sum(f.stat().st_size for f in d.iterdir()) for d in sorted(out.glob("kit-*"))}

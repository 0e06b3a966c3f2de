"""The kit's folder layout (tools/gpukit/pack.py) on stand-in files: folders within the
limit, the large file split and joined back byte for byte, SHA256SUMS usable by `sha256sum -c`,
and a missing or corrupted part refused with its name and folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpukit.pack import MANIFEST, SUMS, KitError, folder_sizes, load_manifest, reassemble, verify
from tests.gpukit._kit import LIMIT, TE_CORE, standin_kit


def _part(manifest: dict, name: str, i: int) -> dict:
    return next(e for e in manifest["files"] if e["name"] == name)["parts"][i]


def test_folders_stay_within_the_limit_and_the_large_file_is_split(tmp_path: Path) -> None:
    kit, manifest, files = standin_kit(tmp_path)
    sizes = folder_sizes(kit)
    assert len(sizes) >= 3 and all(0 < s <= LIMIT for s in sizes.values()), sizes
    assert sum(sizes.values()) > sum(f.stat().st_size for f in files)  # + kit.json, SHA256SUMS
    core = next(e for e in manifest["files"] if e["name"] == TE_CORE)
    assert len(core["parts"]) == 4 and len({p["folder"] for p in core["parts"]}) == 4, core["parts"]
    assert (kit / "kit-01" / MANIFEST).is_file() and (kit / "kit-01" / SUMS).is_file()
    assert not any(kit.glob("*/" + TE_CORE)), "a split file is carried only as its parts"


def test_parts_join_back_byte_for_byte_from_folders_or_flat(tmp_path: Path) -> None:
    kit, manifest, files = standin_kit(tmp_path)
    joined = reassemble(kit, manifest, tmp_path / "work")
    assert sorted(joined) == sorted(f.name for f in files)
    assert all(joined[f.name].read_bytes() == f.read_bytes() for f in files)
    flat = tmp_path / "flat"  # the folders' contents copied into one folder instead
    flat.mkdir()
    for part in kit.glob("kit-*/*"):
        shutil.copy(part, flat / part.name)
    again = reassemble(flat, load_manifest(flat), tmp_path / "work2")
    assert again[TE_CORE].read_bytes() == (tmp_path / "src" / TE_CORE).read_bytes()
    r = subprocess.run(["sha256sum", "-c", "--quiet", SUMS], cwd=flat, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_missing_part_is_named_with_its_folder(tmp_path: Path) -> None:
    kit, manifest, _ = standin_kit(tmp_path)
    part = _part(manifest, TE_CORE, 2)
    (kit / part["folder"] / part["name"]).unlink()
    with pytest.raises(KitError, match=rf"missing part {part['name']} \(from folder {part['folder']}\)"):
        verify(kit, manifest)


def test_a_corrupted_part_is_named_and_nothing_is_joined(tmp_path: Path) -> None:
    kit, manifest, _ = standin_kit(tmp_path)
    part = _part(manifest, TE_CORE, 1)
    path = kit / part["folder"] / part["name"]
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF  # same size, one byte flipped
    path.write_bytes(bytes(data))
    with pytest.raises(KitError, match=rf"checksum mismatch: .*{part['name']} \(from folder {part['folder']}\)"):
        reassemble(kit, manifest, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_a_kit_without_its_first_folder_says_so(tmp_path: Path) -> None:
    kit, _, _ = standin_kit(tmp_path)
    shutil.rmtree(kit / "kit-01")
    with pytest.raises(KitError, match="kit.json not found in .*kit-01"):
        load_manifest(kit)
    with pytest.raises(KitError, match="--kit .* is not a folder"):
        load_manifest(tmp_path / "nowhere")

"""megatron_scale/durable.py: the one atomic write is atomic (a reader sees the old file or the
new one, a failed write leaves the old one and no temporary) and durable (the file and then its
folder fsynced, in that order); a full disk is named as such."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_scale.durable import atomic_write


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "f.json"
    atomic_write(path, "héllo\n")  # str: UTF-8; the folder made
    assert path.read_bytes() == "héllo\n".encode()
    atomic_write(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01" and os.listdir(path.parent) == ["f.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.txt"
    atomic_write(path, "old")

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f.txt"]


def test_the_file_then_its_folder_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "f.txt", "x")
    assert len(synced) == 2 and synced[0].startswith(str(tmp_path / "f.txt.")) and synced[0].endswith(".partial")
    assert synced[1] == str(tmp_path)  # after the rename: the rename itself is on disk


def test_disk_full_names_a_full_disk_through_causes_and_nothing_else(tmp_path: Path) -> None:
    import errno

    from megatron_scale.durable import disk_full

    target = tmp_path / "out" / "model.safetensors"  # need not exist: its nearest parent's file system is asked
    try:
        try:
            raise OSError(errno.EFBIG, "File too large", "big.bin")
        except OSError as inner:
            raise RuntimeError("the writer failed") from inner
    except RuntimeError as e:
        assert disk_full(e, target) == "File too large (big.bin)"
    assert disk_full(OSError(errno.EDQUOT, "quota"), target) == os.strerror(errno.EDQUOT)
    # on the test machine's roomy disk, an unrelated error is not called full
    assert disk_full(RuntimeError("bug"), target) is None
    assert disk_full(OSError(errno.EACCES, "denied"), target) is None


def test_the_floor_imports_without_site_packages() -> None:
    code = "import megatron_scale.durable, megatron_scale.artifacts, megatron_scale.method_catalog, megatron_scale.flags"
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=Path(__file__).resolve().parents[1],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert r.returncode == 0, r.stderr

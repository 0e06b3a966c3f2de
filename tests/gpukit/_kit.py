"""Stand-in kits for the CPU tests: files named like the real kit's, with random bytes (the pack
layer reads none of them), one of them large enough to be split, and one real, tiny, pure-Python
wheel (`kitprobe`) that pip can install offline."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import zipfile
from pathlib import Path
from typing import Any

from gpukit.pack import MIB, pack

LIMIT = 2 * MIB  # small folders, so the stand-in "cu13 wheel" (5 MiB) is split in four
TE_CORE = "transformer_engine_cu13-2.20.2-py3-none-manylinux_2_28_x86_64.whl"
STANDINS = {
    "transformer_engine-2.20.2-py3-none-any.whl": 300_000,
    TE_CORE: 5 * MIB + 12_345,
    "megatron_core-0.19.2-cp312-cp312-manylinux_2_28_x86_64.whl": 700_000,
    "transformer_engine_torch-2.20.2.tar.gz": 200_000,
}


def probe_wheel(dest: Path) -> Path:
    """kitprobe 1.0: a pure-Python wheel pip installs (module kitprobe, VALUE = 42)."""
    files = {"kitprobe.py": b"VALUE = 42\n",
             "kitprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: kitprobe\nVersion: 1.0\n",
             "kitprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                             b"Tag: py3-none-any\n"}
    record = "".join(
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
        for n, b in files.items()) + "kitprobe-1.0.dist-info/RECORD,,\n"
    path = dest / "kitprobe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr("kitprobe-1.0.dist-info/RECORD", record)
    return path


def standin_files(src: Path) -> list[Path]:
    src.mkdir(parents=True)
    files = []
    for name, size in STANDINS.items():
        (src / name).write_bytes(os.urandom(size))
        files.append(src / name)
    return [*files, probe_wheel(src)]


def standin_kit(tmp: Path, install: tuple[str, ...] = ("kitprobe",)) -> tuple[Path, dict[str, Any], list[Path]]:
    """(kit folder, manifest, the original files) for a kit packed from stand-ins."""
    files = standin_files(tmp / "src")
    names = list(STANDINS)
    meta = {"python": "3.12", "te_version": "2.20.2", "te_wheels": [names[0], names[1]], "te_sdist": names[3],
            "mcore_wheel": names[2], "install": list(install), "runtime_wheels": [files[-1].name],
            "python_include": None}
    return tmp / "kit", pack(files, tmp / "kit", meta, LIMIT), files


def fake_headers(where: Path, headers: tuple[str, ...] = ("cudnn.h", "nccl.h", "crt/host_config.h", "nv/target")) -> Path:
    """A folder with the headers the extension's build needs, for CPATH."""
    for h in headers:
        (where / h).parent.mkdir(parents=True, exist_ok=True)
        (where / h).write_text("/* stand-in */\n")
    return where


class Listener:
    """A local TCP port that is listened on but never answered: point a package index at it and
    `contacted()` says whether anything tried."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/simple"

    def contacted(self) -> bool:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def close(self) -> None:
        self.sock.close()

    def env(self) -> dict[str, str]:
        """Index settings pointing pip at this port (what --no-index must make it ignore)."""
        return {"PIP_INDEX_URL": self.url, "PIP_EXTRA_INDEX_URL": self.url, "PIP_NO_INDEX": "0"}


def fatbin_section(fatbins: list[list[tuple[int, bytes]]]) -> bytes:
    """A `.nv_fatbin` section: each fatbin a header (magic, version, header size 16, payload size)
    and its entries, each (arch, payload) with a 64-byte entry header (kind 2: ELF cubin); 8 zero
    bytes of padding between fatbins, as nvcc leaves."""
    import struct

    out = b""
    for entries in fatbins:
        body = b""
        for arch, payload in entries:
            head = bytearray(64)
            struct.pack_into("<HHIQ", head, 0, 2, 0x101, 64, len(payload))
            struct.pack_into("<I", head, 28, arch)
            body += bytes(head) + payload
        out += struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body + bytes(8)
    return out


def fake_elf(section: bytes) -> bytes:
    """A minimal 64-bit little-endian ELF file with sections .text, .nv_fatbin (`section`) and
    .shstrtab, its section headers last."""
    import struct

    text = b"TEXT" * 8
    names = b"\0.text\0.nv_fatbin\0.shstrtab\0"
    body = bytearray(64) + text + section + names
    shoff = len(body)
    off_text, off_fat, off_names = 64, 64 + len(text), 64 + len(text) + len(section)
    body[0:16] = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    struct.pack_into("<Q", body, 0x28, shoff)
    struct.pack_into("<HHH", body, 0x3A, 64, 4, 3)
    sh = struct.Struct("<IIQQQQIIQQ")
    for name, off, size in ((0, 0, 0), (1, off_text, len(text)), (7, off_fat, len(section)),
                            (18, off_names, len(names))):
        body += sh.pack(name, 1, 0, 0, off, size, 0, 0, 8, 0)
    return bytes(body)

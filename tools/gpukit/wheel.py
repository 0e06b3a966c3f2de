"""A wheel with one member replaced: same file name, every other member as it was, and its
RECORD line (urlsafe-base64 sha256 without padding, size) rewritten, so pip installs it and
`pip check`-style verification of RECORD still holds."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def read_member(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        return z.read(member)


def replace_member(src: Path, dst: Path, member: str, data: bytes) -> None:
    """Write `src` to `dst` (atomically) with `member`'s bytes replaced by `data`."""
    tmp = dst.with_name(dst.name + ".tmp")
    with zipfile.ZipFile(src) as zin:
        names = zin.namelist()
        if member not in names:
            raise KeyError(f"{src.name} has no member {member}")
        records = [n for n in names if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise ValueError(f"{src.name}: expected one .dist-info/RECORD, found {records}")
        lines = zin.read(records[0]).decode().splitlines()
        line = f"{member},{record_hash(data)},{len(data)}"
        hit = [i for i, ln in enumerate(lines) if ln.split(",")[0] == member]
        if len(hit) != 1:
            raise ValueError(f"{src.name}: RECORD lists {member} {len(hit)} times")
        lines[hit[0]] = line
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in zin.infolist():
                if info.filename == member:
                    payload = data
                elif info.filename == records[0]:
                    payload = ("\n".join(lines) + "\n").encode()
                else:
                    payload = zin.read(info)
                out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out.external_attr, out.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                zout.writestr(out, payload, compresslevel=9)
    os.replace(tmp, dst)


def check_record(wheel: Path) -> None:
    """Every member's sha256 and size as its RECORD says (ValueError names the first that is not)."""
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        for ln in z.read(record).decode().splitlines():
            name, digest, size = ln.rsplit(",", 2)
            if not digest:
                continue
            data = z.read(name)
            if record_hash(data) != digest or len(data) != int(size):
                raise ValueError(f"{wheel.name}: {name} does not match its RECORD line")

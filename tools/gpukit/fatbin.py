"""Cut a CUDA library's device code to the GPU architectures a node has: keep, in every fatbin of
its `.nv_fatbin` section, only the entries (cubins, PTX) built for those architectures.

An ELF library built by nvcc carries its device code in `.nv_fatbin`: fatbins one after another
(8-byte aligned, zero padding between them), each a 16-byte header (magic 0xBA55ED50, version,
header size, payload size) followed by its entries. Each entry has its own header: kind at +0
(1 PTX, 2 ELF cubin), header size at +4, payload size at +8, the SM architecture at +28 (90 for
sm_90 and sm_90a). The CUDA runtime finds each fatbin through a pointer in `.nvFatBinSegment`
to its header, and picks the entry for the device by the entry headers.

`cut` keeps every fatbin where it was: the kept entries move up behind their header, the header's
payload size shrinks to theirs, and the freed tail is zeroed. The file's size and layout, its
symbol table and every pointer into it stay as they were (the section's bytes are rewritten in
place); only the zeros compress away. Transformer Engine 2.20.2's cu13 core library: 89 fatbins,
629 cubins for 8 architectures, 251.4 MiB of fatbin section, 17.5 MiB of it sm_90.

Standard library only (the kit's tools run on any Python 3).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

MAGIC = 0xBA55ED50
SECTION = ".nv_fatbin"
_ALIGN = 8


class FatbinError(ValueError):
    """A library the cut cannot read as expected (the message says where)."""


@dataclass(frozen=True)
class Entry:
    offset: int  # from the section's start
    kind: int  # 1 PTX, 2 ELF
    arch: int
    length: int  # header + payload


@dataclass
class Fatbin:
    offset: int
    header_size: int
    size: int  # payload size (the entries)
    entries: list[Entry] = field(default_factory=list)


def find_section(buf: bytes | bytearray | memoryview, name: str = SECTION) -> tuple[int, int]:
    """(file offset, size) of the ELF64 little-endian section `name`."""
    if bytes(buf[:4]) != b"\x7fELF" or buf[4] != 2 or buf[5] != 1:
        raise FatbinError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", buf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    if shoff == 0 or shnum == 0:
        raise FatbinError("the ELF file has no section headers")

    def header(i: int) -> tuple[int, int, int]:
        name_off, = struct.unpack_from("<I", buf, shoff + i * shentsize)
        off, size = struct.unpack_from("<QQ", buf, shoff + i * shentsize + 24)
        return name_off, off, size

    _, stroff, _ = header(shstrndx)
    for i in range(shnum):
        name_off, off, size = header(i)
        end = bytes(buf[stroff + name_off:stroff + name_off + len(name) + 1])
        if end == name.encode() + b"\0":
            return off, size
    raise FatbinError(f"no {name} section")


def fatbins(section: bytes | bytearray | memoryview) -> list[Fatbin]:
    """Every fatbin of a `.nv_fatbin` section, with its entries."""
    out: list[Fatbin] = []
    pos, size = 0, len(section)
    while pos + 16 <= size:
        magic, _, hsize, fsize = struct.unpack_from("<IHHQ", section, pos)
        if magic != MAGIC:
            if any(section[pos:pos + _ALIGN]):
                raise FatbinError(f"{SECTION}+{pos:#x}: neither a fatbin header nor zero padding")
            pos += _ALIGN
            continue
        fb = Fatbin(pos, hsize, fsize)
        p, end = pos + hsize, pos + hsize + fsize
        if end > size:
            raise FatbinError(f"{SECTION}+{pos:#x}: fatbin runs past the section's end")
        while p < end:
            kind, = struct.unpack_from("<H", section, p)
            ehsize, psize = struct.unpack_from("<IQ", section, p + 4)
            arch, = struct.unpack_from("<I", section, p + 28)
            if ehsize < 32 or p + ehsize + psize > end:
                raise FatbinError(f"{SECTION}+{p:#x}: entry header runs past its fatbin")
            fb.entries.append(Entry(p, kind, arch, ehsize + psize))
            p += ehsize + psize
        out.append(fb)
        pos = end
    return out


def summary(section: bytes | bytearray | memoryview) -> dict[str, object]:
    """Fatbins, and entries and bytes per architecture (sm_NN)."""
    found = fatbins(section)
    count: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for fb in found:
        for e in fb.entries:
            count[f"sm_{e.arch}"] += 1
            nbytes[f"sm_{e.arch}"] += e.length
    return {"fatbins": len(found), "entries": dict(count), "bytes": dict(nbytes),
            "ptx": sum(e.kind == 1 for fb in found for e in fb.entries)}


def cut(lib: bytes, archs: set[int]) -> tuple[bytes, dict[str, object]]:
    """`lib` with only the entries of `archs` in its fatbins: (the new bytes, what was kept and
    dropped). Every fatbin must keep at least one entry (a kernel with no code for the node would
    fail at launch, far from here)."""
    off, size = find_section(lib)
    buf = bytearray(lib)
    sec = memoryview(buf)[off:off + size]
    before = summary(sec)
    for fb in fatbins(sec):
        keep = [bytes(sec[e.offset:e.offset + e.length]) for e in fb.entries if e.arch in archs]
        if not keep:
            have = sorted({e.arch for e in fb.entries})
            raise FatbinError(f"{SECTION}+{fb.offset:#x}: a fatbin with no entry for sm_{sorted(archs)} "
                              f"(it has sm_{have})")
        w, end = fb.offset + fb.header_size, fb.offset + fb.header_size + fb.size
        for e in keep:
            sec[w:w + len(e)] = e
            w += len(e)
        sec[w:end] = bytes(end - w)
        struct.pack_into("<Q", sec, fb.offset + 8, w - fb.offset - fb.header_size)
    after = summary(sec)
    del sec
    return bytes(buf), {"section_bytes": size, "before": before, "after": after}


def verify_cut(original: bytes, new: bytes, archs: set[int]) -> None:
    """The cut's promise, checked byte for byte: same size, the same bytes outside the section,
    every fatbin header where it was, holding exactly the original's entries of `archs` in their
    order, and zeros after them. FatbinError names the first difference."""
    if len(original) != len(new):
        raise FatbinError(f"size changed: {len(original)} -> {len(new)} bytes")
    off, size = find_section(original)
    if find_section(new) != (off, size):
        raise FatbinError(f"{SECTION} moved or changed size")
    if original[:off] != new[:off] or original[off + size:] != new[off + size:]:
        raise FatbinError(f"bytes outside {SECTION} changed")
    old_sec, new_sec = memoryview(original)[off:off + size], memoryview(new)[off:off + size]
    old_fbs = fatbins(old_sec)
    new_fbs = {fb.offset: fb for fb in fatbins(new_sec)}
    for fb in old_fbs:
        got = new_fbs.get(fb.offset)
        if got is None or bytes(new_sec[fb.offset:fb.offset + 8]) != bytes(old_sec[fb.offset:fb.offset + 8]):
            raise FatbinError(f"{SECTION}+{fb.offset:#x}: fatbin header lost or changed")
        want = [bytes(old_sec[e.offset:e.offset + e.length]) for e in fb.entries if e.arch in archs]
        have = [bytes(new_sec[e.offset:e.offset + e.length]) for e in got.entries]
        if want != have:
            raise FatbinError(f"{SECTION}+{fb.offset:#x}: entries are not the original's sm_{sorted(archs)} ones")
        tail = new_sec[fb.offset + got.header_size + got.size:fb.offset + fb.header_size + fb.size]
        if any(tail):
            raise FatbinError(f"{SECTION}+{fb.offset:#x}: the dropped entries' bytes are not zeroed")
    if len(new_fbs) != len(old_fbs):
        raise FatbinError(f"{len(old_fbs)} fatbins before the cut, {len(new_fbs)} after")

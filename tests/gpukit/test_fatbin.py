"""The core library's cut (tools/gpukit/fatbin.py) on a hand-made ELF file: every fatbin header
stays where it was, holding exactly its sm_90 entries, the others' bytes zeroed, nothing outside
the section touched; and the repacked wheel's RECORD matches its new member."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from gpukit import fatbin, wheel
from gpukit.pack import sha256
from tests.gpukit._kit import fake_elf, fatbin_section

FATBINS = [  # payloads in 8-byte units, as nvcc pads them
    [(75, b"a75....." * 5), (90, b"A90....." * 3), (100, b"a100...." * 6)],
    [(80, b"b80....." * 2), (90, b"B90....." * 4), (90, b"B90a...." * 1), (120, b"b120...." * 9)],  # sm_90, sm_90a
    [(90, b"C90....." * 7)],
]


def test_the_cut_keeps_every_header_and_its_sm90_entries_and_drops_the_rest() -> None:
    lib = fake_elf(fatbin_section(FATBINS))
    off, size = fatbin.find_section(lib)
    before = fatbin.fatbins(memoryview(lib)[off:off + size])
    assert [len(fb.entries) for fb in before] == [3, 4, 1]
    new, stats = fatbin.cut(lib, {90})
    assert len(new) == len(lib) and new[:off] == lib[:off] and new[off + size:] == lib[off + size:]
    after = fatbin.fatbins(memoryview(new)[off:off + size])
    assert [fb.offset for fb in after] == [fb.offset for fb in before], "every fatbin stays where it was"
    assert [[e.arch for e in fb.entries] for fb in after] == [[90], [90, 90], [90]]
    sec = new[off:off + size]
    for fb, entries in zip(after, FATBINS, strict=True):
        kept = [p for a, p in entries if a == 90]
        assert [sec[e.offset + 64:e.offset + e.length] for e in fb.entries] == kept
    for dropped in (b"a75", b"a100", b"b80", b"b120"):
        assert dropped not in new, dropped
    assert stats["before"]["entries"] == {"sm_75": 1, "sm_90": 4, "sm_100": 1, "sm_80": 1, "sm_120": 1}
    assert stats["after"]["entries"] == {"sm_90": 4} and stats["after"]["fatbins"] == 3
    fatbin.verify_cut(lib, new, {90})


def test_verify_names_a_cut_that_lost_an_entry_or_left_bytes() -> None:
    lib = fake_elf(fatbin_section(FATBINS))
    new, _ = fatbin.cut(lib, {90})
    with pytest.raises(fatbin.FatbinError, match="entries are not the original's"):
        fatbin.verify_cut(lib, new, {90, 75})
    off, _ = fatbin.find_section(lib)
    leftover = bytearray(new)
    leftover[len(new) - 200] ^= 1  # a byte of the section names: outside the fatbin section
    with pytest.raises(fatbin.FatbinError, match="outside .nv_fatbin changed"):
        fatbin.verify_cut(lib, bytes(leftover), {90})


def test_a_fatbin_without_the_architecture_is_refused() -> None:
    with pytest.raises(fatbin.FatbinError, match=r"no entry for sm_\[90\] \(it has sm_\[75, 80\]\)"):
        fatbin.cut(fake_elf(fatbin_section([[(90, b"x" * 8)], [(75, b"y" * 8), (80, b"z" * 8)]])), {90})
    with pytest.raises(fatbin.FatbinError, match="not a 64-bit little-endian ELF"):
        fatbin.cut(b"MZ" + bytes(100), {90})


def test_the_repacked_wheel_keeps_its_name_members_and_a_true_record(tmp_path: Path) -> None:
    lib = fake_elf(fatbin_section(FATBINS))
    src = tmp_path / "src" / "transformer_engine_cu13-2.20.2-py3-none-manylinux_2_28_x86_64.whl"
    src.parent.mkdir()
    member = "transformer_engine/wheel_lib/libtransformer_engine.so"
    files = {member: lib, "transformer_engine/__init__.py": b"x = 1\n"}
    record = "".join(f"{n},{wheel.record_hash(b)},{len(b)}\n" for n, b in files.items())
    with zipfile.ZipFile(src, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr("transformer_engine_cu13-2.20.2.dist-info/RECORD", record + "transformer_engine_cu13-2.20.2.dist-info/RECORD,,\n")
    new, _ = fatbin.cut(lib, {90})
    dst = tmp_path / src.name
    wheel.replace_member(src, dst, member, new)
    wheel.check_record(dst)
    assert wheel.read_member(dst, member) == new
    assert wheel.read_member(dst, "transformer_engine/__init__.py") == b"x = 1\n"
    assert sha256(dst) != sha256(src)
    with zipfile.ZipFile(dst) as z:
        assert sorted(z.namelist()) == sorted(zipfile.ZipFile(src).namelist())

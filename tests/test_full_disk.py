"""A full disk mid-write (issue 48): a checkpoint save and a preprocessing run on a small tmpfs
that fills while they write. Each must stop with one error naming what it was writing, leave the
previous checkpoint or dataset as it was and no partial output behind, and succeed once space is
back (the tmpfs remounted larger). Needs root to mount (CI runs as root in its VM); elsewhere the
tests skip, saying why."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._dist import run_ranks


def _mount(path: Path, size: str, remount: bool = False) -> None:
    opts = f"remount,size={size}" if remount else f"size={size}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], check=True, capture_output=True, text=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs (tests shrink it with _mount(..., remount=True)), unmounted after the test."""
    fs = tmp_path / "fs"
    fs.mkdir()
    try:
        _mount(fs, "64m")
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {getattr(e, 'stderr', e)}")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def _used(fs: Path) -> int:
    return shutil.disk_usage(fs).used


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def _save_body(rank: int, world: int, fs_: str) -> dict[str, Any]:
    import torch

    from megatron_scale.checkpoint import CheckpointError
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict
    from tests.checkpoint.test_io import _build, _load, _save, _trained_state

    import time

    fs, res, t0 = Path(fs_), {}, time.perf_counter()
    init_distributed(1, 1, device="cpu", seed=1234)
    model = _build(1)
    load_global_state_dict(model, _trained_state())
    before = _used(fs)
    _save(model, fs / "iter_1")
    size = _used(fs) - before
    digest = _tree_digest(fs / "iter_1")
    _mount(fs, str(_used(fs) + size // 2), remount=True)  # room for half of the next save
    try:
        _save(model, fs / "iter_2")
        res["error"] = ""
    except CheckpointError as e:
        res["error"] = str(e)
    res["left"] = sorted(p.name for p in fs.iterdir())
    res["intact"] = _tree_digest(fs / "iter_1") == digest
    _mount(fs, "64m", remount=True)  # space is back
    _save(model, fs / "iter_2")
    again = _build(1)
    _load(again, fs / "iter_2")
    a, b = global_state_dict(model), global_state_dict(again)
    res["resumed"] = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    res["size"], res["seconds"] = size, time.perf_counter() - t0
    return res


def test_a_save_on_a_full_disk_fails_naming_it_and_keeps_the_previous_checkpoint(small_fs: Path) -> None:
    (res,) = run_ranks(_save_body, 1, str(small_fs))
    assert res["error"].startswith(f"saving {small_fs / 'iter_2'} failed: No space left on device ("), res["error"]
    assert "iter_2.partial removed" in res["error"] and "\n" not in res["error"]
    assert res["left"] == ["iter_1"]  # no iter_2, no iter_2.partial
    assert res["intact"] and res["resumed"]
    print(f"checkpoint {res['size']} bytes; the body took {res['seconds']:.1f} s")


def test_preprocessing_on_a_full_disk_fails_naming_it_and_keeps_the_previous_dataset(small_fs: Path) -> None:
    from megatron_scale.data.demo import english_documents, write_jsonl
    from megatron_scale.data.preprocess import DataError, preprocess
    from megatron_scale.data.tokenizer import TokenizerSpec, train_byte_bpe
    from megatron_scale.data.work import Settings

    src = small_fs.parent / "src"
    src.mkdir()
    small, big = list(english_documents())[:10], list(english_documents())[:200]
    write_jsonl(str(src / "small.jsonl"), small)
    write_jsonl(str(src / "big.jsonl"), big)
    tok = TokenizerSpec("HuggingFaceTokenizer", train_byte_bpe(small, 300, str(src / "tok")))
    settings = Settings(tokenizer=tok, append_eod=True)
    out = str(small_fs / "en")
    preprocess([str(src / "small.jsonl")], out, settings)
    prefix = small_fs / "en_text_document"
    old = {ext: (Path(f"{prefix}.{ext}")).read_bytes() for ext in ("bin", "idx")}
    _mount(small_fs, str(_used(small_fs) + 16 * 1024), remount=True)  # 16 KiB left: the big corpus needs more
    with pytest.raises(DataError) as e:
        preprocess([str(src / "big.jsonl")], out, settings)
    msg = str(e.value)
    assert msg.startswith(f"writing {prefix}.bin/.idx: No space left on device"), msg
    assert sorted(p.name for p in small_fs.iterdir()) == ["en_text_document.bin", "en_text_document.idx"]
    assert {ext: (Path(f"{prefix}.{ext}")).read_bytes() for ext in ("bin", "idx")} == old
    _mount(small_fs, "64m", remount=True)
    got = preprocess([str(src / "big.jsonl")], out, settings)
    assert Path(f"{prefix}.bin").stat().st_size > 16 * 1024 + len(old["bin"])
    assert got is not None


def test_conversion_and_export_on_a_full_disk_fail_naming_it_and_keep_the_previous_output(small_fs: Path) -> None:
    """The HF -> Megatron conversion (one rank, through save_checkpoint) and the Megatron -> HF
    export (convert/hf_io.py atomic_folder, replacing an earlier export with force) each on a file
    system with room for half of what they write."""
    from megatron_scale.convert import ConversionError, convert_hf_to_megatron, convert_megatron_to_hf
    from tests.convert import _hf

    hf = small_fs.parent / "hf"
    _hf.make_hf(hf, tied=False)
    need = sum(f.stat().st_size for f in hf.glob("*.safetensors"))
    ckpt = small_fs / "base"
    _mount(small_fs, str(_used(small_fs) + need // 2), remount=True)
    with pytest.raises(ConversionError) as e:
        convert_hf_to_megatron(hf, ckpt, progress=False)
    msg = str(e.value)
    assert msg.startswith(f"saving {ckpt} failed: No space left on device ("), msg
    print(msg)
    assert "\n" not in msg and sorted(small_fs.iterdir()) == []  # no base, no base.partial
    _mount(small_fs, "64m", remount=True)
    convert_hf_to_megatron(hf, ckpt, progress=False)  # space is back: the same command succeeds

    out = small_fs / "hf-export"
    convert_megatron_to_hf(ckpt, out, progress=False)
    digest = _tree_digest(out)
    _mount(small_fs, str(_used(small_fs) + need // 2), remount=True)
    with pytest.raises(ConversionError) as e:
        convert_megatron_to_hf(ckpt, out, force=True, progress=False)
    msg = str(e.value)
    assert msg.startswith(f"writing {out} failed: No space left on device ("), msg
    print(msg)
    assert msg.endswith(f"nothing was renamed ({out} is as it was)") and "\n" not in msg
    assert sorted(p.name for p in small_fs.iterdir()) == ["base", "hf-export"]  # no .hf-export.*.partial
    assert _tree_digest(out) == digest
    _mount(small_fs, "64m", remount=True)
    convert_megatron_to_hf(ckpt, out, force=True, progress=False)
    assert _tree_digest(out) == digest

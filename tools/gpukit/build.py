"""The build machine's side: download, cut, lay out.

    OUT/main/   kit.json + the one-call kit's wheels (carry: ["gpu_kit/main"])
    OUT/src/    kit.json + TE's extension source, CUDA header wheels, Python.h (fallback: build on the node)
    OUT/full/kit-01 ... kit-05/   the unmodified core wheel in parts (fallback: one call each, pack.py)

main/ holds TE's Python wheel, the core wheel with its library cut to --arch (fatbin.py; same
file name, RECORD rewritten, the cut checked byte for byte against the original), the extension
prebuilt against the node's torch (--extension, built in a venv shaped like the node:
`source.build_extension`, or the `extension` command; without --extension the one committed in
prebuilt/ where it fits --node-python's torch; without either the node builds the extension from
src/), megatron-core and the pydantic stack.
kit.json records what they were built against (Python, torch, CUDA of --node-python: the venv the
extension was built in), the architecture kept, the cut's counts, and every file's size and
sha256, in install order.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from gpukit import contents as c
from gpukit import fatbin, fetch, node, source, wheel
from gpukit.pack import MIB, KitError, folder_sizes, pack, sha256

PREBUILT = Path(__file__).resolve().parent / "prebuilt"
"""TE's PyTorch extension built here against the node's torch, stamped with that torch and the sdist
(source.BUILT_FOR; prebuilt/README.md says how). `build` without --extension takes it when the
--node-python's torch is the stamped one."""


def _entry(path: Path, role: str) -> dict[str, Any]:
    return {"name": path.name, "role": role, "size": path.stat().st_size, "sha256": sha256(path)}


def cut_core(src: Path, dst: Path, archs: set[int]) -> dict[str, Any]:
    """The core wheel at `dst` with its library's device code cut to `archs`, verified."""
    lib = wheel.read_member(src, c.CORE_LIBRARY)
    new, stats = fatbin.cut(lib, archs)
    fatbin.verify_cut(lib, new, archs)
    wheel.replace_member(src, dst, c.CORE_LIBRARY, new)
    wheel.check_record(dst)
    return {**stats, "library_bytes": len(lib), "wheel_bytes_before": src.stat().st_size,
            "wheel_bytes_after": dst.stat().st_size}


def download(dest: Path) -> dict[str, Path]:
    """Every file the kit is built from, by role (pip skips what `dest` already has)."""
    dest.mkdir(parents=True, exist_ok=True)
    specs = {"mcore": c.MCORE, "te_python": c.TE_PYTHON, "te_core": c.TE_CORE,
             **{f"pydantic{i}": s for i, s in enumerate(c.PYDANTIC)}, "typing_extensions": c.TYPING_EXTENSIONS,
             **{f"header:{h}": w for h, w in c.BUILD_HEADERS.items()}}
    missing = [s for s in specs.values() if not list(dest.glob(f"{s.split('==')[0].replace('-', '_')}-*.whl"))]
    if missing:
        fetch.pip_download(missing, dest)
    out = {role: fetch.one(dest, spec) for role, spec in specs.items()}
    sdist = dest / f"{c.TE_SDIST.replace('-', '_')}-{c.TE_VERSION}.tar.gz"
    out["te_sdist"] = sdist if sdist.is_file() else fetch.download_sdist(c.TE_SDIST, c.TE_VERSION, dest)
    return out


def build(out: Path, downloads: Path, *, archs: set[int], extension: Path | None, node_python: str,
          limit: int, python312: str | None = None) -> dict[str, Any]:
    """Lay the kit out under `out` (new). Returns main/'s manifest."""
    if out.exists():
        raise KitError(f"--out {out} already exists; give a new folder")
    if extension is not None and (not extension.is_file() or not extension.name.startswith("transformer_engine_torch-")):
        raise KitError(f"--extension {extension}: not a transformer_engine_torch wheel")
    facts = node.node_facts(node_python)
    if "torch_error" in facts:
        raise KitError(f"--node-python {node_python}: {facts['torch_error']}")
    files = download(downloads)
    if extension is None:  # the one committed beside this code, where it fits the node's torch
        extension = source.reused_build(PREBUILT, facts["torch"], files["te_sdist"].name)
    main = out / c.MAIN
    main.mkdir(parents=True)
    core = main / files["te_core"].name
    stats = cut_core(files["te_core"], core, archs)
    entries = []
    for role in ("pydantic0", "pydantic1", "pydantic2", "pydantic3", "typing_extensions", "mcore", "te_python"):
        shutil.copy2(files[role], main / files[role].name)
        entries.append(_entry(main / files[role].name, role.rstrip("0123")))
    entries.append(_entry(core, "te_core"))
    if extension is not None:  # without one, the node builds it (install --build-from src/)
        shutil.copy2(extension, main / extension.name)
        entries.append(_entry(main / extension.name, "te_torch"))
    manifest = {
        "format": node.FORMAT, "te_version": c.TE_VERSION, "arch": sorted(archs),
        "built_against": {"python": facts["python"], "torch": facts["torch"], "cuda": facts["cuda"]},
        "cut": stats, "files": entries,
    }
    (main / node.KIT_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    src = out / c.SOURCE
    src.mkdir()
    include = fetch.python_include(src, python312)
    srcfiles = [files["te_sdist"], *(files[f"header:{h}"] for h in c.BUILD_HEADERS)]
    for f in srcfiles:
        shutil.copy2(f, src / f.name)
    smeta = {"format": node.FORMAT, "python": c.PYTHON, "te_sdist": files["te_sdist"].name,
             "header_wheels": {h: files[f"header:{h}"].name for h in c.BUILD_HEADERS},
             "python_include": include.name if include else None,
             "files": [_entry(src / f.name, "source") for f in srcfiles] + ([_entry(include, "source")] if include else [])}
    (src / node.KIT_FILE).write_text(json.dumps(smeta, indent=1) + "\n")
    pack([files["te_core"]], out / c.FULL, {"te_version": c.TE_VERSION}, limit)
    return manifest


def sizes(out: Path) -> list[tuple[str, float]]:
    """(folder, MiB) for main/, src/ and each full/kit-NN."""
    rows = [(d, sum(f.stat().st_size for f in (out / d).iterdir()) / MIB) for d in (c.MAIN, c.SOURCE)]
    return rows + [(f"{c.FULL}/{k}", v / MIB) for k, v in folder_sizes(out / c.FULL).items()]

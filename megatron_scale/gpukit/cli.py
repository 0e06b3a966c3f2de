"""The kit's command line (tools/gpu_kit.py on the networked machine; on the GPU node, where the
project is not installed, `python3 -m megatron_scale.gpukit` from the checkout's root):

    build --out DIR [--limit-mib 55]      networked x86-64 machine
    check KIT                             the GPU node, no network, no GPU needed
    install KIT [--work DIR] [--jobs 16]  the GPU node, no network

build downloads megatron-core, Transformer Engine's three pieces and the runtime packages for
CPython 3.12 on manylinux x86-64 and packs them into DIR/kit-01, kit-02, ... (each at most
--limit-mib MiB, with kit.json and SHA256SUMS in kit-01). On the node, KIT is the folder the kit
folders were copied into; install builds TE's PyTorch extension against the node's torch and
installs everything into this Python, never reaching a network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from megatron_scale.gpukit import fetch, node
from megatron_scale.gpukit.pack import MIB, KitError, folder_sizes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download and pack the kit (needs a package index)")
    b.add_argument("--out", type=Path, required=True, help="new folder for kit-01, kit-02, ...")
    b.add_argument("--download", type=Path, help="download folder, reused by a second build (default OUT.download)")
    b.add_argument("--limit-mib", type=int, default=55, help="largest kit folder, MiB")
    b.add_argument("--python312", help="a Python 3.12 whose Python.h the kit carries (default: this one, if 3.12)")
    for name in ("check", "install"):
        s = sub.add_parser(name, help=f"{name} the kit on the GPU node (no network)")
        s.add_argument("kit", type=Path, help="the folder holding kit-01, kit-02, ... (or their files)")
    i = sub.choices["install"]
    i.add_argument("--work", type=Path, help="where files are joined and the extension built (default KIT/work)")
    i.add_argument("--jobs", type=int, default=16, help="parallel compile jobs for the extension (MAX_JOBS)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "build":
            manifest = fetch.build_kit(a.out, a.download or a.out.with_name(a.out.name + ".download"),
                                       limit=a.limit_mib * MIB, python312=a.python312)
            for folder, size in folder_sizes(a.out).items():
                print(f"{folder}  {size / MIB:6.1f} MiB")
            total = sum(e["size"] for e in manifest["files"])
            print(f"{len(manifest['files'])} files, {total / MIB:.1f} MiB; checksums in {a.out / 'kit-01'}")
        elif a.cmd == "check":
            for line in node.check(a.kit)[1]:
                print(line)
            print("gpu_kit: kit checks passed")
        else:
            for line in node.install(a.kit, a.work or a.kit / "work", jobs=a.jobs):
                print(line)
    except KitError as e:
        print(f"gpu_kit: {e}", file=sys.stderr)
        return 1
    return 0


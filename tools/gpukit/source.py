"""The fallback: TE's PyTorch extension built from its source against a Python's own torch (the
kit's src/ folder), on the node when the prebuilt extension does not import there, or on the
build machine in a venv shaped like the node (which is how main/'s prebuilt one is made).

`check_machine` stops at the first missing piece with one line naming it: this Python's version,
a C++ compiler, Python.h, the CUDA headers a pip-installed torch lacks (crt/, nv/: from a CUDA
toolkit, else the kit's header wheels), and the cudnn.h / nccl.h the extension includes (in the
nvidia-cudnn / nvidia-nccl wheels a CUDA torch installs, CPATH or a CUDA include folder).
`build_extension` then runs `pip wheel --no-build-isolation` on the source (NVTE settings below:
the nvidia wheels' headers, no EP code, no local version suffix), never reaching an index
(--no-index, PIP_NO_INDEX=1, PIP_CONFIG_FILE=/dev/null); the wheel lands in work/built, stamped
with the torch it was built for, and a later build for the same torch reuses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpukit import contents as c
from gpukit.pack import KitError

HEADERS = ("cudnn.h", "nccl.h")
SYSTEM_INCLUDE = Path("/usr/include")
BUILD_ENV = {
    "NVTE_FRAMEWORK": "pytorch", "NVTE_PYTORCH_FORCE_BUILD": "TRUE", "NVTE_BUILD_USE_NVIDIA_WHEELS": "1",
    "NVTE_NO_LOCAL_VERSION": "1", "NVTE_WITH_NCCL_EP": "0",
}


_SITES = ("import sys, sysconfig; p = sysconfig.get_paths(); print('\\n'.join([p['purelib'], p['platlib'], "
          "*(s for s in sys.path if s.endswith(('site-packages', 'dist-packages')))]))")


def site_dirs(python: str = sys.executable) -> list[Path]:
    """`python`'s package folders, those it sees beyond its own included (a venv made with
    --system-site-packages sees the node's torch and its nvidia wheels there)."""
    out = subprocess.run([python, "-c", _SITES], capture_output=True, text=True, check=True).stdout.split("\n")
    return [Path(p) for p in dict.fromkeys(x.strip() for x in out) if p and Path(p).is_dir()]


def header_dirs(sites: list[Path], env: Mapping[str, str]) -> list[Path]:
    """Where the check looks for the headers the extension's build needs, in order."""
    dirs = [Path(p) for var in ("CPATH", "CPLUS_INCLUDE_PATH") for p in env.get(var, "").split(":") if p]
    dirs += [d for s in sites for d in sorted(s.glob("nvidia/*/include"))]
    cuda = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    return dirs + [Path(cuda) / "include", SYSTEM_INCLUDE]


def _find_header(header: str, dirs: list[Path]) -> Path | None:
    return next((d / header for d in dirs if (d / header).exists()), None)


def build_includes(manifest: dict[str, Any], files: dict[str, Path], work: Path, env: Mapping[str, str],
                   python: str = sys.executable) -> list[Path]:
    """The include folders for the extension's build (its CPATH): the nvidia wheels' and, for
    each header it needs, the folder `check_machine` found it in (a CUDA toolkit's, say, which
    the build would not search by itself) or else the kit's header wheel, unpacked into
    work/headers (never installed)."""
    sites = site_dirs(python)
    dirs = header_dirs(sites, env)
    out = [d for s in sites for d in sorted(s.glob("nvidia/*/include"))]
    wheels = manifest.get("header_wheels", {})
    for header in (*c.BUILD_HEADERS, *HEADERS):
        hit = _find_header(header, dirs)
        if hit is not None:
            out.append(hit.parents[len(Path(header).parts) - 1])
        elif header in wheels:
            dest = work / "headers" / wheels[header]
            with zipfile.ZipFile(files[wheels[header]]) as z:
                z.extractall(dest)
            out += [d for d in sorted(dest.glob("nvidia/*/include")) if _find_header(header, [d])]
    return list(dict.fromkeys(out))


def compiler(env: Mapping[str, str]) -> str | None:
    cxx = env.get("CXX")
    return shutil.which(cxx) if cxx else (shutil.which("c++") or shutil.which("g++"))


def check_machine(manifest: dict[str, Any], *, sites: list[Path], env: Mapping[str, str],
                  python_version: tuple[int, int] = sys.version_info[:2],
                  python_include: Path | None = None) -> list[str]:
    """What the build needs, before any of it runs: KitError naming the first piece missing; the
    notes otherwise (where each piece was found); `python_include` defaults to this Python's."""
    if python_include is None:
        python_include = Path(sysconfig.get_paths()["include"])
    want = manifest.get("python", c.PYTHON)
    if f"{python_version[0]}.{python_version[1]}" != want:
        raise KitError(f"this kit is for Python {want}; {sys.executable} is "
                       f"{python_version[0]}.{python_version[1]} (run the kit with the node's python{want})")
    cxx = compiler(env)
    if cxx is None:
        raise KitError("no C++ compiler: none at $CXX, c++ or g++ (install the node's g++, "
                       "e.g. build-essential) for Transformer Engine's PyTorch extension")
    notes = [f"C++ compiler: {cxx}"]
    if (python_include / "Python.h").is_file():
        notes.append(f"Python.h: {python_include}")
    elif manifest.get("python_include"):
        notes.append(f"Python.h: from the kit's {manifest['python_include']} ({python_include} lacks it)")
    else:
        raise KitError(f"Python.h not found in {python_include} and the kit carries none "
                       f"(install python{want}-dev, or rebuild the kit on a machine with Python {want})")
    dirs = header_dirs(sites, env)
    for header, wheel in c.BUILD_HEADERS.items():
        hit = _find_header(header, dirs)
        if hit is not None:
            notes.append(f"{header}: {hit}")
        elif header in manifest.get("header_wheels", {}):
            notes.append(f"{header}: from the kit's {manifest['header_wheels'][header]} (no CUDA toolkit here)")
        else:
            raise KitError(f"{header} not found and the kit carries no {wheel.split('==')[0]} wheel: install the CUDA "
                           "toolkit's headers, or rebuild the kit with this checkout")
    for header in HEADERS:
        hit = _find_header(header, dirs)
        if hit is None:
            raise KitError(f"{header} not found (looked in CPATH, CPLUS_INCLUDE_PATH, <site-packages>/nvidia/*/include "
                           f"and the CUDA include folder): the node's CUDA torch should have brought it with the "
                           f"nvidia-{header.split('.')[0]} wheel; set CPATH to its folder")
        notes.append(f"{header}: {hit}")
    return notes


def pip_env(env: Mapping[str, str]) -> dict[str, str]:
    """pip with no index and no configuration file (so no configured index or find-links)."""
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def build_command(work: Path, manifest: dict[str, Any], python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "-w", str(work / "built"), str(work / manifest["te_sdist"])]


def build_env(env: Mapping[str, str], include: list[Path], jobs: int) -> dict[str, str]:
    cpath = ":".join([*map(str, include), *([env["CPATH"]] if env.get("CPATH") else [])])
    return {**pip_env(env), **BUILD_ENV, "MAX_JOBS": str(jobs), **({"CPATH": cpath} if cpath else {})}


def _run(argv: list[str], env: Mapping[str, str], log: Path, what: str) -> None:
    with log.open("a") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        r = subprocess.run(argv, env=dict(env), stdout=f, stderr=subprocess.STDOUT, check=False)
    if r.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or [""]
        raise KitError(f"{what} failed (exit {r.returncode}): {tail[0][:300]} (full log: {log})")


def _torch_version(python: str) -> str:
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()


BUILT_FOR = "BUILT_FOR"  # in work/built: the torch version and the source the wheel was built from


def reused_build(built: Path, torch_version: str, sdist: str) -> Path | None:
    """The extension wheel an earlier install left in `built`, if it was built from `sdist` for
    this torch version (a second session on the node skips the build)."""
    wheels = sorted(built.glob("transformer_engine_torch-*.whl"))
    stamp = built / BUILT_FOR
    if len(wheels) == 1 and stamp.is_file() and stamp.read_text().split() == [torch_version, sdist]:
        return wheels[0]
    return None


def build_extension(work: Path, manifest: dict[str, Any], files: dict[str, Path], env: Mapping[str, str], jobs: int,
                    python: str, torch_version: str) -> Path:
    """TE's PyTorch extension built against `python`'s torch, into work/built (stamped)."""
    include = build_includes(manifest, files, work, env, python)
    if manifest.get("python_include") and not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        with tarfile.open(files[manifest["python_include"]]) as t:
            t.extractall(work / "include", filter="data")
        include.append(work / "include" / "python3.12")
    built = work / "built"
    shutil.rmtree(built, ignore_errors=True)
    built.mkdir()
    _run(build_command(work, manifest, python), build_env(env, include, jobs), work / "build.log",
         "the Transformer Engine extension build")
    wheels = sorted(built.glob("transformer_engine_torch-*.whl"))
    if len(wheels) != 1:
        raise KitError(f"the build left {len(wheels)} transformer_engine_torch wheels in {built}, not one")
    (built / BUILT_FOR).write_text(f"{torch_version} {manifest['te_sdist']}\n")
    return wheels[0]



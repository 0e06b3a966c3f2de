"""The GPU node's side: check the kit and the machine, then install, never reaching a network.

`check` (no GPU needed) stops at the first problem with one line naming it: the kit's manifest, a
missing or corrupted part (pack.verify), this Python's version, a C++ compiler, Python.h, the CUDA
headers a pip-installed torch lacks (crt/, nv/: from a CUDA toolkit, else the kit's header wheels),
and the cudnn.h / nccl.h the TE extension includes (found in the nvidia-cudnn / nvidia-nccl wheels
that a CUDA torch installs, in CPATH or a CUDA include folder). `install` then needs a CUDA device and
a CUDA 13 torch, and runs, in this Python:
  1. pip install of the runtime list from the kit alone (missing packages only; torch and the
     nvidia-* / triton packages pinned to the installed versions, so nothing replaces them);
  2. a build of TE's PyTorch extension from its source against this torch
     (--no-build-isolation, env from docs/gpu.md: the nvidia wheels' headers, no EP code, no
     local version suffix); the built wheel is kept in the work folder, and reused by a later
     install into the same folder for the same torch;
  3. pip install --no-deps of megatron-core, TE's two wheels and the built one;
  4. an import of transformer_engine.pytorch, printing its FP8 availability.
Every pip call gets --no-index, PIP_NO_INDEX=1 and PIP_CONFIG_FILE=/dev/null (no configured index
or find-links), so an index is never consulted.
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
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

from megatron_scale.gpukit import contents as c
from megatron_scale.gpukit.pack import KitError, load_manifest, reassemble, verify

HEADERS = ("cudnn.h", "nccl.h")
SYSTEM_INCLUDE = Path("/usr/include")
BUILD_ENV = {
    "NVTE_FRAMEWORK": "pytorch", "NVTE_PYTORCH_FORCE_BUILD": "TRUE", "NVTE_BUILD_USE_NVIDIA_WHEELS": "1",
    "NVTE_NO_LOCAL_VERSION": "1", "NVTE_WITH_NCCL_EP": "0",
}


def site_dirs() -> list[Path]:
    """This Python's package folders, those it sees beyond its own included (a venv made with
    --system-site-packages sees the node's torch and its nvidia wheels there)."""
    paths = sysconfig.get_paths()
    seen = [paths["purelib"], paths["platlib"], *(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))]
    return [Path(p) for p in dict.fromkeys(seen) if Path(p).is_dir()]


def header_dirs(sites: list[Path], env: Mapping[str, str]) -> list[Path]:
    """Where the check looks for the headers the extension's build needs, in order."""
    dirs = [Path(p) for var in ("CPATH", "CPLUS_INCLUDE_PATH") for p in env.get(var, "").split(":") if p]
    dirs += [d for s in sites for d in sorted(s.glob("nvidia/*/include"))]
    cuda = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    return dirs + [Path(cuda) / "include", SYSTEM_INCLUDE]


def _find_header(header: str, dirs: list[Path]) -> Path | None:
    return next((d / header for d in dirs if (d / header).exists()), None)


def build_includes(manifest: dict[str, Any], files: dict[str, Path], work: Path, env: Mapping[str, str]) -> list[Path]:
    """The include folders for the extension's build (its CPATH): the nvidia wheels' and, for
    each header it needs, the folder `check_machine` found it in (a CUDA toolkit's, say, which
    the build would not search by itself) or else the kit's header wheel, unpacked into
    work/headers (never installed)."""
    dirs = header_dirs(site_dirs(), env)
    out = [d for s in site_dirs() for d in sorted(s.glob("nvidia/*/include"))]
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
                  python_include: Path = Path(sysconfig.get_paths()["include"])) -> list[str]:
    """What the build needs, before any of it runs: KitError naming the first piece missing; the
    notes otherwise (where each piece was found)."""
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


def check(kit: Path, env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The kit complete and intact, and this machine able to build: (manifest, notes)."""
    manifest = load_manifest(kit)
    parts = verify(kit, manifest)
    notes = [f"kit: {len(manifest['files'])} files in {len(parts)} parts, every sha256 matches"]
    return manifest, notes + check_machine(manifest, sites=site_dirs(), env=os.environ if env is None else env)


def check_cuda() -> str:
    """A CUDA device and a CUDA 13 torch (the kit's TE core library is built for CUDA 13)."""
    import torch

    if not torch.cuda.is_available():
        raise KitError(f"no CUDA device visible to {sys.executable} (torch.cuda.is_available() is False); "
                       "the kit checks passed: run this on the GPU node")
    cuda = torch.version.cuda or ""
    if cuda.split(".")[0] != "13":
        raise KitError(f"torch {torch.__version__} is built for CUDA {cuda or 'none'}; the kit's Transformer Engine "
                       "is transformer-engine-cu13 (CUDA 13)")
    return f"torch {torch.__version__}, CUDA {cuda}, {torch.cuda.get_device_name(0)}"


def pip_env(env: Mapping[str, str]) -> dict[str, str]:
    """pip with no index and no configuration file (so no configured index or find-links)."""
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def keep_installed(work: Path) -> Path:
    """A pip constraints file pinning torch and the CUDA libraries it came with."""
    keep = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions()
                   if d.metadata["Name"] and (d.metadata["Name"].lower() in ("torch", "triton")
                                              or d.metadata["Name"].lower().startswith("nvidia-"))})
    path = work / "keep-installed.txt"
    path.write_text("".join(f"{k}\n" for k in keep))
    return path


def runtime_command(work: Path, manifest: dict[str, Any], constraints: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "install", "-q", "--no-index", "--only-binary=:all:", "--find-links", str(work),
            "-c", str(constraints), *manifest["install"]]


def build_command(work: Path, manifest: dict[str, Any], python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "-w", str(work / "built"), str(work / manifest["te_sdist"])]


def build_env(env: Mapping[str, str], include: list[Path], jobs: int) -> dict[str, str]:
    cpath = ":".join([*map(str, include), *([env["CPATH"]] if env.get("CPATH") else [])])
    return {**pip_env(env), **BUILD_ENV, "MAX_JOBS": str(jobs), **({"CPATH": cpath} if cpath else {})}


def te_command(work: Path, manifest: dict[str, Any], built: Path, python: str = sys.executable) -> list[str]:
    wheels = [work / manifest["mcore_wheel"], *(work / n for n in manifest["te_wheels"]), built]
    return [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *map(str, wheels)]


FP8_REPORT = ("import torch, transformer_engine, transformer_engine.pytorch as te; "
              "print('Transformer Engine', transformer_engine.__version__, '- FP8 available:', "
              "te.is_fp8_available(return_reason=True))")


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
    """Step 2: TE's PyTorch extension built against this torch, into work/built (stamped)."""
    include = build_includes(manifest, files, work, env)
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


def install(kit: Path, work: Path, *, jobs: int = 16, python: str = sys.executable) -> list[str]:
    """check(), check_cuda(), then steps 1-4 (module docstring): what each printed."""
    manifest, notes = check(kit)
    notes.append(check_cuda())
    files = reassemble(kit, manifest, work)
    log = work / "install.log"
    env = dict(os.environ)
    torch_before = _torch_version(python)
    _run(runtime_command(work, manifest, keep_installed(work), python), pip_env(env), log, "the runtime install")
    built, how = reused_build(work / "built", torch_before, manifest["te_sdist"]), "reused"
    if built is None:
        built, how = build_extension(work, manifest, files, env, jobs, python, torch_before), "built"
    _run(te_command(work, manifest, built, python), pip_env(env), log, "the Transformer Engine install")
    if _torch_version(python) != torch_before:
        raise KitError(f"torch changed from {torch_before}: the kit must never replace it (see {log})")
    r = subprocess.run([python, "-c", FP8_REPORT], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise KitError(f"transformer_engine.pytorch does not import: {(r.stderr.strip().splitlines() or [''])[-1]}")
    return [*notes, f"{how} {built.name} (kept in {built.parent} for this torch)", r.stdout.strip()]

"""The GPU node's side of the one-call kit (main/): check it against the node, install it, never
reaching a network.

`check` compares what the kit was built against (kit.json's `built_against`) with the node, as
the node's Python sees it, and refuses with one line for each difference:
  - torch: the prebuilt extension is C++ compiled against one torch's headers and ABI;
  - CUDA: the core library is transformer-engine-cu13, for a CUDA 13 torch;
  - GPU architecture: the core library keeps only the cubins of the kit's architecture (sm_90:
    H100, H200); no CUDA device visible is a note, or a refusal with --require-gpu;
  - Python: the wheels are for CPython 3.12;
and checks every file's sha256. `install` then runs one `pip install --no-index --no-deps
--no-compile` of the kit's wheels (typing-extensions only where the node's is older) and imports
transformer_engine.pytorch. Its fallbacks: `--full DIR` puts the unmodified core wheel (full/,
joined from its parts) in place of the cut one, for another architecture or a cut that does not
run; `--build-from DIR` builds the extension from src/ against the node's torch (source.py),
for another torch or a prebuilt extension that does not import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpukit import contents as c
from gpukit import source
from gpukit.pack import KitError, load_manifest, reassemble, sha256

KIT_FILE = "kit.json"
FORMAT = 2
FACTS = """import json, sys
out = {"python": "%d.%d" % sys.version_info[:2]}
try:
    import torch
except ImportError as e:
    out["torch_error"] = str(e)
else:
    out.update(torch=torch.__version__, cuda=torch.version.cuda, gpus=[])
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            out["gpus"].append({"name": torch.cuda.get_device_name(i), "arch": 10 * major + minor})
try:
    from importlib.metadata import version
    out["typing_extensions"] = version("typing_extensions")
except Exception:
    out["typing_extensions"] = None
print(json.dumps(out))
"""
FP8_REPORT = ("import torch, transformer_engine, transformer_engine.pytorch as te; "
              "print('Transformer Engine', transformer_engine.__version__, 'imports; FP8:', "
              "te.is_fp8_available(return_reason=True) if torch.cuda.is_available() else 'no CUDA device here')")


def node_facts(python: str = sys.executable) -> dict[str, Any]:
    """Python, torch, torch's CUDA and each visible GPU's architecture, as `python` sees them."""
    r = subprocess.run([python, "-c", FACTS], capture_output=True, text=True, check=False, timeout=300)
    if r.returncode != 0:
        raise KitError(f"{python} cannot report its torch: {(r.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _version_key(v: str | None) -> tuple[int, ...]:
    parts = []
    for x in (v or "0").split("+")[0].split("."):
        digits = "".join(ch for ch in x if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def mismatches(manifest: dict[str, Any], facts: dict[str, Any], *, require_gpu: bool = False,
               full: bool = False, build: bool = False) -> tuple[list[str], list[str]]:
    """(refusals, notes): one line per difference between the kit and the node. `full`: the
    unmodified core wheel replaces the cut one (any architecture); `build`: the extension is
    built on the node (any torch)."""
    want = manifest["built_against"]
    bad: list[str] = []
    notes: list[str] = []
    if facts.get("python") != want["python"]:
        bad.append(f"Python: the kit's wheels are for CPython {want['python']}; this node's is {facts.get('python')}")
    if "torch_error" in facts:
        bad.append(f"torch: the node's Python cannot import torch ({facts['torch_error']})")
        return bad, notes
    if str(facts.get("cuda") or "").split(".")[0] != want["cuda"].split(".")[0]:
        bad.append(f"CUDA: the kit's core library is transformer-engine-cu{want['cuda'].split('.')[0]}; this node's "
                   f"torch {facts['torch']} is built for CUDA {facts.get('cuda') or 'none (a CPU build)'}")
    if not any(f["role"] == "te_torch" for f in manifest["files"]) and not build:
        bad.append(f"extension: the kit carries no prebuilt transformer_engine_torch (build it here: install "
                   f"--build-from {c.SOURCE}/)")
    elif facts["torch"] != want["torch"]:
        if build:
            notes.append(f"torch {facts['torch']}: the extension is built here (the prebuilt one is for {want['torch']})")
        else:
            bad.append(f"torch: the prebuilt extension is for torch {want['torch']}; this node has {facts['torch']} "
                       f"(build it here: install --build-from {c.SOURCE}/)")
    archs = set(manifest["arch"])
    if not facts["gpus"]:
        line = "GPU: no CUDA device visible, the architecture is not checked"
        (bad if require_gpu else notes).append(line + (" (--require-gpu)" if require_gpu else ""))
    for gpu in facts["gpus"]:
        if gpu["arch"] not in archs and not full:
            bad.append(f"GPU architecture: {gpu['name']} is sm_{gpu['arch']}; the kit's core library keeps only "
                       f"sm_{', sm_'.join(map(str, sorted(archs)))} (install --full {c.FULL}/ with the unmodified wheel)")
        else:
            notes.append(f"GPU: {gpu['name']}, sm_{gpu['arch']}")
    return bad, notes


def verify_files(kit: Path, manifest: dict[str, Any]) -> None:
    for f in manifest["files"]:
        path = kit / f["name"]
        if not path.is_file():
            raise KitError(f"missing {path} (copy the kit's {c.MAIN}/ folder again)")
        if path.stat().st_size != f["size"] or sha256(path) != f["sha256"]:
            raise KitError(f"checksum mismatch: {path} is not the file the kit was built with")


def load(kit: Path) -> dict[str, Any]:
    path = kit / KIT_FILE
    if not path.is_file():
        raise KitError(f"{path} not found: give the kit's {c.MAIN}/ folder (gpu_kit/{c.MAIN})")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise KitError(f"{path}: kit format {manifest.get('format')!r}, this checkout reads format {FORMAT}: "
                       "rebuild the kit with this checkout")
    return manifest


def check(kit: Path, python: str = sys.executable, *, require_gpu: bool = False, full: bool = False,
          build: bool = False) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(manifest, node facts, notes); KitError with one line per refusal."""
    manifest = load(kit)
    verify_files(kit, manifest)
    facts = node_facts(python)
    bad, notes = mismatches(manifest, facts, require_gpu=require_gpu, full=full, build=build)
    if bad:
        raise KitError("this node does not match the kit:\n" + "\n".join(bad))
    return manifest, facts, [f"kit: {len(manifest['files'])} files, every sha256 matches", *notes]


def pip_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """pip with no index and no configuration file (so no configured index or find-links)."""
    return {**(os.environ if env is None else env), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def wheels_to_install(kit: Path, manifest: dict[str, Any], facts: dict[str, Any]) -> list[Path]:
    """The kit's wheels in install order; typing-extensions only where the node's is older."""
    want_te = next(f["name"] for f in manifest["files"] if f["role"] == "typing_extensions").split("-")[1]
    out = []
    for f in manifest["files"]:
        if f["role"] == "typing_extensions" and _version_key(facts.get("typing_extensions")) >= _version_key(want_te):
            continue
        out.append(kit / f["name"])
    return out


def install_command(wheels: list[Path], python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", *map(str, wheels)]


def install(kit: Path, python: str = sys.executable, *, require_gpu: bool = False, full: Path | None = None,
            build_from: Path | None = None, work: Path | None = None, jobs: int = 16) -> list[str]:
    """check(), then the kit's wheels installed into `python`'s environment, then an import of
    transformer_engine.pytorch. What each step found, as lines."""
    manifest, facts, notes = check(kit, python, require_gpu=require_gpu, full=full is not None,
                                   build=build_from is not None)
    work = work or kit.parent / "work"
    wheels = wheels_to_install(kit, manifest, facts)
    role = {kit / f["name"]: f["role"] for f in manifest["files"]}
    if full is not None:
        joined = reassemble(full, load_manifest(full), work)
        core = next(p for n, p in joined.items() if n.startswith("transformer_engine_cu"))
        wheels = [core if role.get(w) == "te_core" else w for w in wheels]
        notes.append(f"core library: the unmodified {core.name}, joined from {full}")
    if build_from is not None:
        src = load(build_from)
        verify_files(build_from, src)
        files = {f["name"]: build_from / f["name"] for f in src["files"]}
        for name, path in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            if not (work / name).exists():
                os.symlink(path.resolve(), work / name)
        source.check_machine(src, sites=source.site_dirs(python), env=os.environ, python_version=tuple(
            int(x) for x in facts["python"].split(".")))
        built = source.reused_build(work / "built", facts["torch"], src["te_sdist"]) or source.build_extension(
            work, src, files, os.environ, jobs, python, facts["torch"])
        wheels = [w for w in wheels if role.get(w) != "te_torch"] + [built]
        notes.append(f"extension: built here against torch {facts['torch']} ({built.name})")
    r = subprocess.run(install_command(wheels, python), env=pip_env(), capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise KitError(f"pip install of the kit failed: {(r.stderr.strip().splitlines() or [''])[-1][:300]}")
    notes.append(f"installed {len(wheels)} wheels: {', '.join(w.name.split('-')[0] for w in wheels)}")
    if node_facts(python).get("torch") != facts["torch"]:
        raise KitError(f"torch changed from {facts['torch']}: the kit must never replace it")
    t = subprocess.run([python, "-c", FP8_REPORT], capture_output=True, text=True, check=False)
    if t.returncode != 0:
        raise KitError("transformer_engine.pytorch does not import: "
                       f"{(t.stderr.strip().splitlines() or [''])[-1][:300]} (fallbacks: docs/gpu.md)")
    return [*notes, t.stdout.strip()]

"""The one-call kit on the node (tools/gpukit/node.py, `python3 tools/gpukit check`), with node
facts from a stand-in Python: a node that matches passes; one whose torch, CUDA or GPU
architecture differs is refused with one line for each difference; a bad file is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpukit import node
from gpukit.pack import sha256

ROOT = Path(__file__).resolve().parents[2]
BUILT = {"python": "3.12", "torch": "2.11.0+cu130", "cuda": "13.0"}
H100 = {"name": "NVIDIA H100 80GB HBM3", "arch": 90}
ROLES = {"pydantic-2.14.4-py3-none-any.whl": "pydantic", "typing_extensions-4.16.0-py3-none-any.whl": "typing_extensions",
         "megatron_core-0.19.2-cp312-cp312-manylinux_2_28_x86_64.whl": "mcore",
         "transformer_engine_cu13-2.20.2-py3-none-manylinux_2_28_x86_64.whl": "te_core",
         "transformer_engine_torch-2.20.2-cp312-cp312-linux_x86_64.whl": "te_torch"}


def _kit(tmp: Path) -> Path:
    kit = tmp / "main"
    kit.mkdir()
    files = []
    for name, role in ROLES.items():
        (kit / name).write_bytes(name.encode())
        files.append({"name": name, "role": role, "size": len(name), "sha256": sha256(kit / name)})
    (kit / node.KIT_FILE).write_text(json.dumps({"format": node.FORMAT, "arch": [90], "built_against": BUILT,
                                                  "files": files}))
    return kit


def _python(tmp: Path, **facts: object) -> str:
    """A stand-in for the node's Python: prints these facts whatever it is asked."""
    facts = {**BUILT, "gpus": [H100], "typing_extensions": "4.15.0", **facts}
    path = tmp / "python"
    path.write_text(f"#!/bin/sh\necho '{json.dumps(facts)}'\n")
    path.chmod(0o755)
    return str(path)


def _check(tmp: Path, kit: Path, *args: str, **facts: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "gpukit"), "check", str(kit), "--python",
                           _python(tmp, **facts), *args], capture_output=True, text=True, timeout=60, check=False)


def test_a_matching_node_passes(tmp_path: Path) -> None:
    r = _check(tmp_path, _kit(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "every sha256 matches" in r.stdout and "GPU: NVIDIA H100 80GB HBM3, sm_90" in r.stdout


def test_a_mismatched_node_is_refused_one_line_each(tmp_path: Path) -> None:
    b200 = {"name": "NVIDIA B200", "arch": 100}
    r = _check(tmp_path, _kit(tmp_path), torch="2.13.0+cu128", cuda="12.8", gpus=[b200])
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "gpukit: this node does not match the kit:", lines
    assert len(lines) == 4, lines
    assert "CUDA: the kit's core library is transformer-engine-cu13; this node's torch 2.13.0+cu128 is built for " \
           "CUDA 12.8" in lines[1]
    assert "torch: the prebuilt extension is for torch 2.11.0+cu130; this node has 2.13.0+cu128" in lines[2]
    assert "GPU architecture: NVIDIA B200 is sm_100; the kit's core library keeps only sm_90" in lines[3]


@pytest.mark.parametrize(("facts", "refusal"), [
    ({"torch": "2.11.0+cu129"}, "torch: the prebuilt extension is for torch 2.11.0+cu130"),
    ({"cuda": "12.9", "torch": "2.11.0+cu130"}, "CUDA: the kit's core library is transformer-engine-cu13"),
    ({"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "arch": 80}]}, "GPU architecture: NVIDIA A100-SXM4-80GB is sm_80"),
    ({"python": "3.11"}, "Python: the kit's wheels are for CPython 3.12; this node's is 3.11"),
])
def test_each_difference_alone_is_refused(tmp_path: Path, facts: dict, refusal: str) -> None:
    r = _check(tmp_path, _kit(tmp_path), **facts)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 2 and refusal in r.stderr, r.stderr


def test_no_gpu_is_a_note_unless_required_and_the_fallbacks_lift_their_refusals(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    r = _check(tmp_path, kit, gpus=[])
    assert r.returncode == 0 and "no CUDA device visible, the architecture is not checked" in r.stdout, r.stdout
    r = _check(tmp_path, kit, "--require-gpu", gpus=[])
    assert r.returncode == 1 and "(--require-gpu)" in r.stderr
    a100 = [{"name": "NVIDIA A100", "arch": 80}]
    assert _check(tmp_path, kit, "--full", "--build", torch="2.12.0+cu130", gpus=a100).returncode == 0


def test_a_changed_file_is_named(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    name = next(n for n, r in ROLES.items() if r == "te_core")
    (kit / name).write_bytes(b"x" * len(name))
    r = _check(tmp_path, kit)
    assert r.returncode == 1 and f"checksum mismatch: {kit / name}" in r.stderr, r.stderr


def test_the_install_is_one_offline_no_deps_pip_call_keeping_a_newer_typing_extensions(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    manifest = node.load(kit)
    older = node.wheels_to_install(kit, manifest, {"typing_extensions": "4.12.2"})
    newer = node.wheels_to_install(kit, manifest, {"typing_extensions": "4.16.1"})
    assert [w.name for w in older] == list(ROLES)
    assert [w.name for w in newer] == [n for n in ROLES if not n.startswith("typing_extensions")]
    cmd = node.install_command(older, "py")
    assert cmd[:3] == ["py", "-m", "pip"] and {"--no-index", "--no-deps", "--no-compile"} <= set(cmd)
    env = node.pip_env({"PIP_INDEX_URL": "http://index.invalid/simple"})
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_CONFIG_FILE"] == "/dev/null"


def test_the_kit_tools_import_the_standard_library_only() -> None:
    """tools/gpukit runs on the build machine and on the node with any Python 3, the project
    not installed."""
    import ast

    allowed = set(sys.stdlib_module_names) | {"gpukit"}
    for path in sorted((ROOT / "tools" / "gpukit").glob("*.py")):
        for node_ in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node_.names] if isinstance(node_, ast.Import) else (
                [node_.module] if isinstance(node_, ast.ImportFrom) and node_.level == 0 and node_.module else [])
            for name in names:
                assert name.split(".")[0] in allowed or name == "__future__", f"{path.name} imports {name}"


def test_a_kit_without_a_prebuilt_extension_asks_for_the_build(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    manifest = json.loads((kit / node.KIT_FILE).read_text())
    manifest["files"] = [f for f in manifest["files"] if f["role"] != "te_torch"]
    (kit / node.KIT_FILE).write_text(json.dumps(manifest))
    r = _check(tmp_path, kit)
    assert r.returncode == 1 and "the kit carries no prebuilt transformer_engine_torch" in r.stderr, r.stderr
    assert _check(tmp_path, kit, "--build").returncode == 0

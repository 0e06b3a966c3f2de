"""The extension's build from source (tools/gpukit/source.py: the node's fallback, and how the
kit's prebuilt extension is made) without a GPU: the checks before the build, each refusing with
the missing piece's name; the command it runs (offline, against this torch); and a stand-in
source built offline, with an index configured that nothing may contact."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpukit import contents, source
from gpukit.pack import KitError
from tests.gpukit._kit import Listener, fake_headers

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = {"python": "3.12", "python_include": None, "te_sdist": "transformer_engine_torch-2.20.2.tar.gz"}


def _check(tmp: Path, *, env: dict[str, str] | None = None, sites: list[Path] | None = None,
           python_version: tuple[int, int] = (3, 12), include: Path | None = None, manifest: dict | None = None) -> list[str]:
    if include is None:
        include = tmp / "pyinc"
        include.mkdir(exist_ok=True)
        (include / "Python.h").write_text("")
    if env is None:
        env = {"CPATH": str(fake_headers(tmp / "h")), "CUDA_HOME": str(tmp / "no-cuda")}
    return source.check_machine(manifest or MANIFEST, sites=sites or [], env=env,
                              python_version=python_version, python_include=include)


def test_a_complete_machine_passes_and_says_where_each_piece_is(tmp_path: Path) -> None:
    notes = _check(tmp_path)
    assert any(n.startswith("C++ compiler: ") for n in notes), notes
    assert f"cudnn.h: {tmp_path / 'h' / 'cudnn.h'}" in notes and f"nccl.h: {tmp_path / 'h' / 'nccl.h'}" in notes


def test_headers_are_found_in_the_nvidia_wheels(tmp_path: Path) -> None:
    site = tmp_path / "site"
    fake_headers(site / "nvidia" / "cudnn" / "include")
    fake_headers(site / "nvidia" / "nccl" / "include")
    notes = _check(tmp_path, env={"CUDA_HOME": str(tmp_path / "no-cuda")}, sites=[site])
    assert f"cudnn.h: {site / 'nvidia/cudnn/include/cudnn.h'}" in notes, notes


@pytest.mark.parametrize("missing", ["cudnn.h", "nccl.h"])
def test_a_missing_header_is_named(tmp_path: Path, missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h = fake_headers(tmp_path / "h")
    (h / missing).unlink()
    monkeypatch.setattr(source, "SYSTEM_INCLUDE", tmp_path / "usr-include")  # this machine's own may have it
    with pytest.raises(KitError, match=rf"^{missing} not found .* set CPATH"):
        _check(tmp_path, env={"CPATH": str(h), "CUDA_HOME": str(tmp_path / "no-cuda")})


def test_cuda_headers_a_pip_torch_lacks_come_from_the_kit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "SYSTEM_INCLUDE", tmp_path / "usr-include")
    env = {"CPATH": str(fake_headers(tmp_path / "h", ("cudnn.h", "nccl.h"))), "CUDA_HOME": str(tmp_path / "no-cuda")}
    with pytest.raises(KitError, match=r"^crt/host_config.h not found and the kit carries no nvidia-cuda-crt wheel"):
        _check(tmp_path, env=env)
    wheels = {"crt/host_config.h": "nvidia_cuda_crt-13.0.88-py3-none-any.whl", "nv/target": "nvidia_cuda_cccl.whl"}
    notes = _check(tmp_path, env=env, manifest={**MANIFEST, "header_wheels": wheels})
    assert "crt/host_config.h: from the kit's nvidia_cuda_crt-13.0.88-py3-none-any.whl (no CUDA toolkit here)" in notes


def test_no_compiler_is_named(tmp_path: Path) -> None:
    env = {"CPATH": str(fake_headers(tmp_path / "h")), "CXX": str(tmp_path / "no-such-c++")}
    with pytest.raises(KitError, match=r"^no C\+\+ compiler"):
        _check(tmp_path, env=env)


def test_python_h_missing_is_named_unless_the_kit_carries_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty-include"
    empty.mkdir()
    with pytest.raises(KitError, match=r"^Python.h not found .*python3.12-dev"):
        _check(tmp_path, include=empty)
    notes = _check(tmp_path, include=empty, manifest={**MANIFEST, "python_include": contents.PYTHON_INCLUDE})
    assert any("from the kit's python3.12-include.tar.gz" in n for n in notes), notes


def test_another_python_is_refused_by_version(tmp_path: Path) -> None:
    with pytest.raises(KitError, match=r"this kit is for Python 3.12; .* is 3.11"):
        _check(tmp_path, python_version=(3, 11))


def test_the_build_command_never_reaches_an_index(tmp_path: Path) -> None:
    kit = MANIFEST
    env = source.pip_env({"PIP_INDEX_URL": "http://index.invalid/simple"})
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_CONFIG_FILE"] == os.devnull
    build = source.build_command(tmp_path, kit)
    assert {"--no-build-isolation", "--no-index", "--no-deps"} <= set(build) and build[0] == sys.executable
    benv = source.build_env({"CPATH": "/x"}, [tmp_path / "inc"], 16)
    assert benv["CPATH"] == f"{tmp_path / 'inc'}:/x" and benv["MAX_JOBS"] == "16" and benv["PIP_NO_INDEX"] == "1"
    assert {k: benv[k] for k in source.BUILD_ENV} == source.BUILD_ENV
    assert benv["NVTE_NO_LOCAL_VERSION"] == "1" and benv["NVTE_WITH_NCCL_EP"] == "0"


def test_the_build_sees_each_header_where_it_was_found_or_from_the_kit(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    monkeypatch.setattr(source, "SYSTEM_INCLUDE", tmp_path / "usr-include")
    monkeypatch.setattr(source, "site_dirs", lambda python=None: [])
    wheels = {}
    for header, name in (("crt/host_config.h", "crt.whl"), ("nv/target", "cccl.whl")):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr(f"nvidia/cu13/include/{header}", "/* stand-in */\n")
        wheels[header] = name
    files = {n: tmp_path / n for n in wheels.values()}
    toolkit = fake_headers(tmp_path / "cuda" / "include", ("nv/target", "cudnn.h", "nccl.h"))
    dirs = source.build_includes({"header_wheels": wheels}, files, tmp_path / "work", {"CUDA_HOME": str(tmp_path / "cuda")})
    assert dirs == [tmp_path / "work" / "headers" / "crt.whl" / "nvidia" / "cu13" / "include", toolkit], dirs
    assert (dirs[0] / "crt" / "host_config.h").is_file() and not (tmp_path / "work" / "headers" / "cccl.whl").exists()


def _standin_sdist(work: Path) -> str:
    """transformer_engine_torch-2.20.2.tar.gz: a setuptools project that fails unless the build
    env names the header folders and NVTE's settings (what TE's real setup.py reads)."""
    import tarfile

    src = work / "src" / "transformer_engine_torch-2.20.2"
    src.mkdir(parents=True)
    (src / "setup.py").write_text(
        "import os\nfrom setuptools import setup\n"
        "assert os.environ['NVTE_PYTORCH_FORCE_BUILD'] == 'TRUE' and os.environ['NVTE_WITH_NCCL_EP'] == '0'\n"
        "assert any(os.path.exists(os.path.join(d, 'cudnn.h')) for d in os.environ['CPATH'].split(':'))\n"
        "setup(name='transformer_engine_torch', version='2.20.2', py_modules=[])\n")
    name = "transformer_engine_torch-2.20.2.tar.gz"
    with tarfile.open(work / name, "w:gz") as t:
        t.add(src, arcname=src.name)
    return name


def test_the_build_step_runs_offline_and_a_second_install_reuses_its_wheel(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    manifest = {"te_sdist": _standin_sdist(work), "header_wheels": {}, "python_include": None}
    monkeypatch.setattr(source, "SYSTEM_INCLUDE", tmp_path / "usr-include")
    index = Listener()
    try:
        env = {**os.environ, **index.env(), "CPATH": str(fake_headers(tmp_path / "h"))}
        wheel = source.build_extension(work, manifest, {}, env, 2, sys.executable, "2.11.0+cu130")
        assert not index.contacted(), "the build reached the configured index"
    finally:
        index.close()
    assert wheel.name.startswith("transformer_engine_torch-2.20.2-") and wheel.parent == work / "built"
    assert source.reused_build(work / "built", "2.11.0+cu130", manifest["te_sdist"]) == wheel
    assert source.reused_build(work / "built", "2.12.0+cu130", manifest["te_sdist"]) is None, "another torch: rebuild"


def test_the_committed_extension_is_stamped_for_the_nodes_torch_only() -> None:
    """tools/gpukit/prebuilt/: `build` without --extension takes it for torch 2.11.0+cu130 (the node's)
    and for no other torch; it is TE's extension for CPython 3.12 with its shared object inside."""
    import zipfile

    from gpukit import build

    sdist = f"{contents.TE_SDIST.replace('-', '_')}-{contents.TE_VERSION}.tar.gz"
    wheel = source.reused_build(build.PREBUILT, "2.11.0+cu130", sdist)
    assert wheel is not None and wheel.name == f"transformer_engine_torch-{contents.TE_VERSION}-cp312-cp312-linux_x86_64.whl"
    assert source.reused_build(build.PREBUILT, "2.13.0+cu128", sdist) is None, "another torch: no prebuilt extension"
    assert source.reused_build(build.PREBUILT, "2.11.0+cu130", "transformer_engine_torch-2.21.0.tar.gz") is None
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.endswith(".cpython-312-x86_64-linux-gnu.so") and "transformer_engine_torch" in n for n in names), names

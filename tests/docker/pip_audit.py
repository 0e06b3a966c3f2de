"""Would any pip command in a Dockerfile install, upgrade or replace what NVIDIA's base image
ships compiled together: torch (and torchvision/torchaudio/triton built with it), Transformer
Engine, apex, flash-attn and the nvidia-* CUDA libraries?

Refused, each naming the Dockerfile's line:
- a protected package named on a pip command line or in a `-r` file (copied from the repository);
- a pip install *with* dependencies whose dependency closure reaches a protected package pip
  would have to change. The closure is what pip would walk: the project's own pyproject.toml
  (with the extras asked for) and every other package's metadata as installed where this check
  runs (the test environment, which holds the image's extra packages). An edge to torch is
  allowed only when its specifier admits the base image's torch (`ARG NGC_TORCH`), because
  pip then keeps the installed one; --force-reinstall, --ignore-installed, --upgrade-strategy
  eager, --target/--prefix/--root make pip install the closure afresh, so there no edge is;
- anything that bypasses NGC's constraint file (/etc/pip/constraint.txt, found through
  PIP_CONSTRAINT): setting PIP_CONSTRAINT, `pip --isolated`, `uv pip`, writing the file;
- what cannot be audited: URLs, wheels and paths other than the project, `-r` files not copied
  from the repository, unresolved variables, pip fed through xargs or a non-shell heredoc.
"""

from __future__ import annotations

import re
import tomllib
from collections import deque
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.docker.dockerfile import Command, DockerfileError, Instruction, instructions, run_commands

PROTECTED = {"torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "apex", "flash-attn",
             "flash-attn-3", "transformer-engine", "transformer-engine-torch", "transformer-engine-cu12",
             "transformer-engine-cu13"}
NOT_CUDA = {"nvidia-ml-py"}  # NVML's Python bindings: no CUDA library inside
VALUE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                 "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root",
                 "--upgrade-strategy", "-C", "--config-settings", "--global-option", "--no-binary",
                 "--only-binary", "--platform", "--python-version", "--implementation", "--abi", "--src",
                 "--cache-dir", "--log", "--timeout", "--retries", "--trusted-host", "--proxy", "--cert",
                 "--client-cert", "--exists-action", "--report", "--root-user-action", "--python",
                 "--progress-bar", "--keyring-provider", "--use-feature", "--use-deprecated"}
FRESH = {"--force-reinstall", "-I", "--ignore-installed", "-t", "--target", "--prefix", "--root"}
READERS = {"cat", "grep", "head", "tail", "less", "ls", "test", "["}


def protected(name: str) -> bool:
    n = canonicalize_name(name)
    return n in PROTECTED or (n.startswith("nvidia-") and n not in NOT_CUDA)


@dataclass
class State:
    """What earlier instructions set: variables, the working directory, what COPY put where."""

    variables: dict[str, str] = field(default_factory=dict)
    workdir: PurePosixPath = PurePosixPath("/")
    project_dir: PurePosixPath | None = None
    copies: list[tuple[str, PurePosixPath, bool]] = field(default_factory=list)  # (src, dest, dest is a dir)


class Audit:
    def __init__(self, repo: Path, image_torch: str | None, name: str = "docker/Dockerfile") -> None:
        self.repo, self.name = repo, name
        self.image_torch = Version(image_torch) if image_torch else None
        self.project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
        self.refusals: list[str] = []

    def refuse(self, line: int, message: str) -> None:
        self.refusals.append(f"{self.name}:{line}: {message}")

    # -- instructions -------------------------------------------------------------------------
    def run(self, text: str) -> list[str]:
        state = State()
        try:
            parsed = instructions(text)
        except DockerfileError as e:
            self.refuse(0, str(e))
            return self.refusals
        for ins in parsed:
            if ins.keyword in {"ARG", "ENV"}:
                self._assign(ins, state)
            elif ins.keyword == "WORKDIR":
                state.workdir = state.workdir / self._expand(ins.text.strip(), state, ins.line)
            elif ins.keyword in {"COPY", "ADD"}:
                self._copy(ins, state)
            elif ins.keyword == "RUN":
                try:
                    found = run_commands(ins)
                except DockerfileError as e:
                    self.refuse(ins.line, str(e))
                    continue
                for cmd in found:
                    if isinstance(cmd, tuple):
                        if re.search(r"\bpip\b", cmd[1]):
                            self.refuse(cmd[0], "pip inside a heredoc fed to a program other than a shell "
                                                "cannot be audited; run pip as a shell command")
                    else:
                        self._command(cmd, state)
        return self.refusals

    def _assign(self, ins: Instruction, state: State) -> None:
        text = ins.text.strip()
        pairs = re.findall(r"""([A-Za-z_][A-Za-z0-9_]*)(?:=("[^"]*"|'[^']*'|\S*))?""", text)
        if ins.keyword == "ENV" and "=" not in text.split()[0]:  # legacy `ENV NAME value`
            pairs = [(text.split()[0], text.split(None, 1)[1] if " " in text else "")]
        for key, value in pairs:
            if key == "PIP_CONSTRAINT":
                self.refuse(ins.line, f"{ins.keyword} PIP_CONSTRAINT replaces NGC's constraint file "
                                      "(/etc/pip/constraint.txt), which keeps the shipped torch/TE/apex")
            state.variables[key] = value.strip("\"'")

    def _copy(self, ins: Instruction, state: State) -> None:
        words = [w for w in ins.text.split() if not w.startswith("--")]
        if len(words) < 2 or "--from=" in ins.text or ins.heredocs:
            return  # from another stage or inline: nothing of the repository's
        *srcs, dest = words
        dest_path = state.workdir / self._expand(dest, state, ins.line)
        is_dir = dest.endswith("/") or len(srcs) > 1 or dest in {".", "./"}
        for src in srcs:
            target = dest_path / PurePosixPath(src).name if is_dir else dest_path
            src_dir = (self.repo / src).is_dir()
            state.copies.append((src.rstrip("/"), target, src_dir))
            if PurePosixPath(src).name == "pyproject.toml":
                state.project_dir = target.parent
            elif src_dir and (self.repo / src / "pyproject.toml").is_file():  # COPY . /src
                state.project_dir = dest_path if src in {".", "./"} else target

    def _expand(self, word: str, state: State, line: int) -> str:
        def sub(m: re.Match[str]) -> str:
            key = m.group(1) or m.group(2)
            if key not in state.variables:
                self.refuse(line, f"${key} is not set by an ARG/ENV before this line: cannot check {word!r}")
                return m.group(0)
            return state.variables[key]

        return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, word)

    # -- shell commands -----------------------------------------------------------------------
    def _command(self, cmd: Command, state: State) -> None:
        argv = list(cmd.argv)
        for target in cmd.redirects:
            if "constraint" in target:
                self.refuse(cmd.line, f"writes {target}: NGC's constraint file must stay as shipped")
        while argv and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]) or argv[0] in {"env", "export",
                                                                                             "sudo", "exec", "nice"}):
            if argv[0].startswith("PIP_CONSTRAINT="):
                self.refuse(cmd.line, "PIP_CONSTRAINT= overrides NGC's constraint file for this command")
            if argv[0] == "export" and any(a.startswith("PIP_CONSTRAINT") for a in argv[1:]):
                self.refuse(cmd.line, "export PIP_CONSTRAINT overrides NGC's constraint file")
            argv = argv[1:]
        if not argv:
            return
        prog = argv[0].rsplit("/", 1)[-1]
        if prog == "uv" and argv[1:2] == ["pip"]:
            self.refuse(cmd.line, "uv pip does not read PIP_CONSTRAINT; use pip")
            return
        if prog == "xargs" and any("pip" in a for a in argv):
            self.refuse(cmd.line, "pip through xargs: its arguments cannot be audited")
            return
        pip_args = None
        if re.fullmatch(r"pip(\d+(\.\d+)?)?", prog):
            pip_args = argv[1:]
        elif re.fullmatch(r"python(\d+(\.\d+)?)?", prog) and "-m" in argv and argv[argv.index("-m") + 1:][:1] == ["pip"]:
            pip_args = argv[argv.index("-m") + 2:]
        if pip_args is None:
            if prog not in READERS and any("constraint.txt" in a for a in argv[1:]):
                self.refuse(cmd.line, f"{prog} touches NGC's constraint file; it must stay as shipped")
            return
        self._pip(cmd.line, pip_args, state)

    def _pip(self, line: int, args: list[str], state: State) -> None:
        if "--isolated" in args:
            self.refuse(line, "pip --isolated ignores PIP_CONSTRAINT (NGC's constraint file)")
        sub_i = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if sub_i is None:
            return
        sub, rest = args[sub_i], args[sub_i + 1:]
        if sub == "config" and any("constraint" in a for a in rest):
            self.refuse(line, "pip config changes the constraint setting")
        if sub not in {"install", "uninstall"}:
            return
        opts, reqs = self._parse(line, rest, state)
        for text, origin in reqs:
            self._named(line, text, origin, sub)
        if sub == "uninstall" or "--no-deps" in opts:
            return
        fresh = bool(FRESH & set(opts)) or opts.get("--upgrade-strategy") == "eager"
        for text, origin in reqs:
            self._closure(line, text, origin, fresh, state)

    def _parse(self, line: int, args: list[str], state: State) -> tuple[dict[str, str], list[tuple[str, str]]]:
        opts: dict[str, str] = {}
        reqs: list[tuple[str, str]] = []
        k = 0
        while k < len(args):
            a = args[k]
            key, eq, value = a.partition("=")
            if a.startswith("--") and eq:
                opts[key] = value
            elif a in VALUE_OPTIONS:
                value = args[k + 1] if k + 1 < len(args) else ""
                opts[a] = value
                k += 1
                if a in {"-r", "--requirement"}:
                    reqs += self._requirements_file(line, self._expand(value, state, line), state)
                elif a in {"-e", "--editable"}:
                    reqs.append((self._expand(value, state, line), "-e"))
            elif a.startswith("-"):
                opts[a] = ""
            else:
                reqs.append((self._expand(a, state, line), "command line"))
            k += 1
        if "-U" in opts:
            opts["--upgrade"] = ""
        return opts, reqs

    def _requirements_file(self, line: int, path: str, state: State) -> list[tuple[str, str]]:
        image_path = state.workdir / path
        for src, dest, is_dir in state.copies:
            if image_path == dest or (is_dir and dest in image_path.parents):
                repo_file = self.repo / src / image_path.relative_to(dest) if is_dir else self.repo / src
                out = []
                # pip's format: a trailing backslash continues the line; options such as --hash
                # follow the requirement on its line
                for raw in re.sub(r"\\\n", " ", repo_file.read_text()).splitlines():
                    req = re.split(r"\s--?[a-z]", raw.split(" #", 1)[0].strip(), maxsplit=1)[0].strip()
                    if req.startswith(("-r ", "--requirement ")):  # relative to the file naming it
                        out += self._requirements_file(line, str(image_path.parent / req.split(None, 1)[1]), state)
                    elif req and not req.startswith(("#", "-")):
                        out.append((req, f"-r {path}"))
                return out
        self.refuse(line, f"-r {path}: not a file COPY'd from the repository, so it cannot be checked")
        return []

    # -- what pip would install ---------------------------------------------------------------
    def _project_extras(self, text: str, state: State) -> set[str] | None:
        """The extras asked of the project when `text` is its directory, else None."""
        m = re.fullmatch(r"(?P<path>[^\[]+?)/?(\[(?P<extras>[^\]]*)\])?", text)
        if not m or not m.group("path").startswith((".", "/", "~")) or state.project_dir is None:
            return None
        if state.workdir / m.group("path") != state.project_dir:
            return None
        return {e.strip() for e in (m.group("extras") or "").split(",") if e.strip()}

    def _named(self, line: int, text: str, origin: str, sub: str) -> None:
        if "$" in text:
            return  # _expand refused it already
        if text.startswith((".", "/", "~")) or "://" in text or text.endswith((".whl", ".tar.gz", ".zip")):
            return  # paths and URLs: judged in _closure (the project) or refused there
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            self.refuse(line, f"{text!r} ({origin}) is not a requirement pip accepts: {e}")
            return
        if protected(req.name):
            verb = "uninstall" if sub == "uninstall" else "install or upgrade"
            self.refuse(line, f"pip {sub} {text} ({origin}) would {verb} {req.name}, which the base image "
                              "ships built against its own torch")

    def _closure(self, line: int, text: str, origin: str, fresh: bool, state: State) -> None:
        extras = self._project_extras(text, state)
        if extras is not None:
            start: tuple[str, set[str]] = (canonicalize_name(self.project["name"]), extras)
        elif text.startswith((".", "/", "~")) or "://" in text or text.endswith((".whl", ".tar.gz", ".zip")):
            self.refuse(line, f"{text} ({origin}): a path or URL other than the project cannot be audited; "
                              "install it with --no-deps")
            return
        else:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                return  # refused by _named
            if protected(req.name):
                return  # refused by _named
            start = (canonicalize_name(req.name), set(req.extras))
            if not self._installed_matches(line, req, text):
                return
        queue = deque([(start, (start[0],))])
        seen: set[tuple[str, frozenset[str]]] = set()
        while queue:
            (name, extras), path = queue.popleft()
            if (name, frozenset(extras)) in seen:
                continue
            seen.add((name, frozenset(extras)))
            for dep in self._requires(line, name, extras, text):
                dep_name = canonicalize_name(dep.name)
                chain = " -> ".join((*path, f"{dep.name}{dep.specifier}"))
                if protected(dep_name):
                    keeps = (dep_name == "torch" and not fresh and self.image_torch is not None
                             and dep.specifier.contains(self.image_torch, prereleases=True))
                    if not keeps:
                        why = ("it reinstalls the whole closure" if fresh else
                               f"the base image's torch {self.image_torch} does not satisfy it"
                               if dep_name == "torch" and self.image_torch else "")
                        self.refuse(line, f"pip install {text} without --no-deps would pull {dep.name} "
                                          f"({chain}){': ' + why if why else ''}")
                    continue
                queue.append(((dep_name, set(dep.extras)), (*path, dep_name)))

    def _installed_matches(self, line: int, req: Requirement, text: str) -> bool:
        try:
            found = distribution(req.name).version
        except PackageNotFoundError:
            self.refuse(line, f"pip install {text} without --no-deps: {req.name} is not installed where this "
                              "check runs, so what it depends on cannot be seen")
            return False
        if not req.specifier.contains(found, prereleases=True):
            self.refuse(line, f"pip install {text} without --no-deps: the checking environment has "
                              f"{req.name} {found}, so what {text} depends on cannot be seen")
            return False
        return True

    def _requires(self, line: int, name: str, extras: set[str], text: str) -> list[Requirement]:
        if name == canonicalize_name(self.project["name"]):
            specs = list(self.project.get("dependencies", []))
            for extra in extras:
                specs += self.project.get("optional-dependencies", {}).get(extra, [])
            reqs = [Requirement(s) for s in specs]
        else:
            try:
                reqs = [Requirement(s) for s in distribution(name).requires or []]
            except PackageNotFoundError:
                self.refuse(line, f"pip install {text} without --no-deps pulls {name}, which is not installed "
                                  "where this check runs, so what it depends on cannot be seen")
                return []
        envs = [{"extra": e} for e in extras | {""}]
        return [r for r in reqs if r.marker is None or any(r.marker.evaluate(env) for env in envs)]


def audit(text: str, repo: Path, image_torch: str | None, name: str = "docker/Dockerfile") -> list[str]:
    """Every refusal for Dockerfile `text` ("<name>:<line>: why"); empty when it is clean."""
    return Audit(repo, image_torch, name).run(text)

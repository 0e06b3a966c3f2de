"""What `tools/venv.sh --newest` resolved, against the lock and against pyproject.toml's ranges.

    python tools/newest_report.py requirements/lock.txt requirements/no-deps.txt

Run with the Python of the venv to report on (.venv-newest). For every requirement the project
declares (its dependencies, the extras `test` names, `eval`, the build group, requirements/no-deps.in)
one line: the range, the lock's release, the release installed here, and the newest release the
package index serves (`pip index versions`, no pip-config constraint), marked where the range
excludes it. Then every other installed package whose release differs from the lock. Standard
library and `packaging` only: it runs before anything of the project is trusted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)")


@dataclass(frozen=True)
class Row:
    name: str
    declared: str  # the range pyproject.toml (or no-deps.in) gives, "" for none
    locked: str | None
    installed: str | None
    newest: str | None  # the index's newest release, None where it could not be asked

    @property
    def newest_excluded(self) -> bool:
        """The index serves a release the declared range keeps out."""
        if not self.newest or not self.declared:
            return False
        try:
            return not Requirement(f"{self.name}{self.declared}").specifier.contains(Version(self.newest), prereleases=True)
        except InvalidVersion:
            return False

    def line(self) -> str:
        newest = self.newest or "?"
        mark = f"  <- {newest} is outside {self.declared}" if self.newest_excluded else ""
        moved = "" if (self.installed or "").split("+")[0] == (self.locked or "") else "  (differs from the lock)"
        return (f"{self.name:<24} {self.declared or '(any)':<24} lock {self.locked or '-':<12} "
                f"resolved {self.installed or '-':<22} newest served {newest}{mark}{moved}")


def locked(paths: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if m := PIN.match(line):
                out[canonicalize_name(m[1])] = m[2]
    return out


def declared() -> dict[str, str]:
    """name -> range, from pyproject.toml (dependencies, the test extra and the extras it names, eval,
    the build group) and requirements/no-deps.in."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    meta, out = project["project"], {}
    texts = list(meta["dependencies"]) + list(project["dependency-groups"]["build"])
    extras, seen = ["test", "eval"], set()
    while extras:
        extra = extras.pop()
        seen.add(extra)
        for text in meta["optional-dependencies"][extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == canonicalize_name(meta["name"]):
                extras += [e for e in req.extras if e not in seen]
            else:
                texts.append(text)
    texts += [t.split("#")[0].strip() for t in (ROOT / "requirements" / "no-deps.in").read_text().splitlines()]
    for text in filter(None, texts):
        req = Requirement(text)
        out[canonicalize_name(req.name)] = str(req.specifier)
    return out


def newest_served(name: str) -> str | None:
    """The index's newest release of `name` (pip index versions), None if pip could not say."""
    env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, "--disable-pip-version-check"],
                       capture_output=True, text=True, env=env, timeout=300)
    m = re.match(rf"\s*{re.escape(name)}\s*\(([^)]+)\)", r.stdout, re.IGNORECASE) if r.returncode == 0 else None
    return m[1] if m else None


def rows(wanted: dict[str, str], lock: dict[str, str], have: dict[str, str], newest: dict[str, str | None]) -> list[Row]:
    return [Row(n, wanted[n], lock.get(n), have.get(n), newest.get(n)) for n in sorted(wanted)]


def main(argv: list[str]) -> int:
    lock = locked(argv)
    have: dict[str, str] = {}
    for d in distributions():
        have.setdefault(canonicalize_name(d.metadata["Name"]), d.version)
    wanted = declared()
    table = rows(wanted, lock, have, {n: newest_served(n) for n in wanted})
    print("tools/newest_report.py: each requirement: its range, the lock's release, the release resolved here, "
          "and the index's newest")
    for row in table:
        print("  " + row.line())
    excluded = [r.name for r in table if r.newest_excluded]
    print("tools/newest_report.py: newest releases outside the declared ranges:", ", ".join(excluded) or "none")
    others = [f"{n} {have[n]} (lock {v})" for n, v in sorted(lock.items())
              if n in have and n not in wanted and have[n].split("+")[0] != v]
    print("tools/newest_report.py: other packages that differ from the lock:", ", ".join(others) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

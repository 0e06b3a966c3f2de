"""Every relative Markdown link and image in README.md, docs/ and results/ points to a file or
folder that exists, and to a heading of that file where it names an anchor (#...). Also the
layout those links rely on: docs/ holds guides only (Markdown), every results/ folder is dated,
has its notes.md and a line in results/README.md, and the README stays short and names the test
command CI runs.

Anchors are GitHub's: the heading's text, lower-cased, punctuation dropped, spaces turned into
hyphens, a repeated heading numbered -1, -2, ... Links inside code (fenced blocks and `spans`)
are not links and are not checked; http(s) and mailto links are not followed. Standard library
only; the whole check reads about a hundred files, well under a second.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# `](target)` or `](target "title")`: the text before it may hold brackets of its own
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("docs", "results"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return [f for f in files if f.is_file()]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code, with inline code spans removed."""
    out, fenced = [], None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fenced is None:
                fenced = m.group(1)
            elif fenced == m.group(1):
                fenced = None
            continue
        if fenced is None:
            out.append((n, CODE_SPAN.sub("", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = FENCE.match(line)
        if m:
            fenced = m.group(1) if fenced is None else (None if fenced == m.group(1) else fenced)
            continue
        h = HEADING.match(line) if fenced is None else None
        if h:
            base = slug(h.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            found.add(base if k == 0 else f"{base}-{k}")
    return frozenset(found)


def broken_links(path: Path) -> list[str]:
    problems = []
    rel = path.relative_to(ROOT)
    for n, line in prose_lines(path):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{rel}:{n}: ({target})"
            if not dest.exists():
                problems.append(f"{where}: {file_part} does not exist")
            elif not dest.is_relative_to(ROOT):
                problems.append(f"{where}: points outside the repository")
            elif anchor:
                if dest.suffix != ".md" or dest.is_dir():
                    problems.append(f"{where}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(dest):
                    problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def test_every_relative_link_and_image_resolves():
    files = markdown_files()
    assert (ROOT / "README.md") in files and any(f.parent.name == "docs" for f in files)
    problems = [p for f in files for p in broken_links(f)]
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("heading, anchor", [
    ("The frontier on SmolLM2: every method at equal learning (issue 30)",
     "the-frontier-on-smollm2-every-method-at-equal-learning-issue-30"),
    ("Methods side by side: one array task per method (`ARRAY=1`)",
     "methods-side-by-side-one-array-task-per-method-array1"),
    ("GPU (H200), local path, bf16", "gpu-h200-local-path-bf16"),
    ("What the job writes (`$WORKDIR`)", "what-the-job-writes-workdir"),
    ("`ROUTE_UNIT` and [the sweep](x.md)", "route_unit-and-the-sweep"),
])
def test_slug_is_githubs(heading, anchor):
    assert slug(heading) == anchor


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Part two\n\n## Part two\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#part-two-1) [ok](a.md) ![img](missing.png) [bad](a.md#part-three)\n"
                    "```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)` [web](https://example.com/x)\n",
                    encoding="utf-8")
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "missing.png does not exist" in problems[0] and "no heading #part-three" in problems[1]


def test_docs_hold_guides_and_results_are_dated_and_indexed():
    strays = [str(f.relative_to(ROOT)) for f in (ROOT / "docs").rglob("*") if f.is_file() and f.suffix != ".md"]
    assert not strays, f"docs/ holds guides only; measured runs go to a dated results/ folder: {strays}"
    index = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    folders = sorted(d for d in (ROOT / "results").iterdir() if d.is_dir())
    assert folders
    for d in folders:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9][a-z0-9-]*", d.name), f"results/{d.name}: not <date>-<name>"
        assert (d / "notes.md").is_file(), f"results/{d.name}/notes.md is missing"
        assert f"]({d.name}/notes.md)" in index, f"results/README.md has no line for {d.name}"


def test_readme_is_short_and_names_the_ci_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 150, f"README.md has {len(readme)} lines; at most 150 (the guides are in docs/)"
    assert any(line.startswith("bash tests/run.sh ") for line in readme), "the README's test command"
    assert "exec bash tests/run.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")

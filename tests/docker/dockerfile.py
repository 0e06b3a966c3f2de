"""A Dockerfile read the way BuildKit reads it, as far as the pip audit needs: instructions with
their first line number, backslash continuations joined (comment lines inside them dropped, as
Docker drops them), RUN heredocs (`RUN <<EOF ... EOF`, `<<-EOF`, quoted delimiters) attached to
their instruction, and the shell commands of a RUN split into simple commands (`&&`, `||`, `;`,
`|`, subshells, `sh -c "..."`) each with the physical line it starts on.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
OPERATORS = {"&&", "||", ";", ";;", "|", "&", "(", ")", "|&"}
REDIRECTS = {">", ">>", "<", ">&", "<&", "&>", "&>>", ">|", "<>"}
SHELL_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time"}


class DockerfileError(ValueError):
    """The text is not a Dockerfile this reader can follow (the message names the line)."""


@dataclass
class Instruction:
    line: int                     # 1-based line of the keyword
    keyword: str                  # upper case: FROM, RUN, ENV, ...
    text: str                     # arguments, continuations joined; newlines kept so lines can be counted
    heredocs: list[tuple[int, str]] = field(default_factory=list)  # (first body line, body)


@dataclass(frozen=True)
class Command:
    line: int
    argv: tuple[str, ...]
    redirects: tuple[str, ...] = ()  # redirection targets (files written or read)


def instructions(text: str) -> list[Instruction]:
    """The instructions of `text`, in order."""
    lines = text.split("\n")
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            if re.match(r"#\s*escape\s*=", stripped) and not out:
                raise DockerfileError(f"line {i + 1}: an escape directive; only the default '\\' is supported")
            i += 1
            continue
        start = i
        continuing = raw.rstrip().endswith("\\")
        parts = [raw.rstrip()[:-1] if continuing else raw]
        while continuing and i + 1 < len(lines):
            i += 1
            nxt = lines[i]
            if not nxt.strip() or nxt.strip().startswith("#"):  # dropped by Docker; kept as a line count
                parts.append("")
                continue
            continuing = nxt.rstrip().endswith("\\")
            parts.append(nxt.rstrip()[:-1] if continuing else nxt)
        i += 1
        joined = "\n".join(parts)
        keyword, rest = re.match(r"\s*(\S+)(.*)$", joined, re.S).groups()  # type: ignore[union-attr]
        ins = Instruction(start + 1, keyword.upper(), rest)
        if ins.keyword in {"RUN", "COPY", "ADD"}:
            for strip_tabs, _, word in HEREDOC.findall(rest):
                body_start = i
                body = []
                while True:
                    if i >= len(lines):
                        raise DockerfileError(f"line {start + 1}: heredoc <<{word} never ends")
                    line = lines[i].lstrip("\t") if strip_tabs else lines[i]
                    i += 1
                    if line == word:
                        break
                    body.append(line)
                ins.heredocs.append((body_start + 1, "\n".join(body)))
        out.append(ins)
    return out


def _tokens(script: str, first_line: int, newline_ends_command: bool) -> list[tuple[int, str]]:
    if newline_ends_command:  # a script body: a newline ends a command unless escaped
        script = re.sub(r"\\\n", " \x00", script).replace("\n", " ;\n").replace("\x00", "\n")
    lex = shlex.shlex(script, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    out = []
    try:
        while (tok := lex.get_token()) != lex.eof:
            out.append((first_line + lex.lineno - 1, tok))
    except ValueError as e:
        raise DockerfileError(f"line {first_line}: cannot split the shell command ({e})") from e
    return out


def commands(script: str, first_line: int, newline_ends_command: bool = False) -> list[Command]:
    """The simple commands of a shell script; `sh -c`/`bash -c` strings are split too."""
    out: list[Command] = []
    argv: list[str] = []
    redirects: list[str] = []
    line = first_line
    toks = _tokens(script, first_line, newline_ends_command)
    k = 0
    while k < len(toks):
        tok_line, tok = toks[k]
        if tok in OPERATORS:
            _flush(out, line, argv, redirects)
            argv, redirects = [], []
        elif tok in REDIRECTS:
            if argv and argv[-1].isdigit():
                argv.pop()  # the fd of 2>&1
            if k + 1 < len(toks):
                redirects.append(toks[k + 1][1])
                k += 1
        else:
            if not argv:
                line = tok_line
                if tok in SHELL_KEYWORDS:
                    k += 1
                    continue
            argv.append(tok)
        k += 1
    _flush(out, line, argv, redirects)
    return out


def _flush(out: list[Command], line: int, argv: list[str], redirects: list[str]) -> None:
    if not argv:
        return
    name = argv[0].rsplit("/", 1)[-1]
    if name in {"sh", "bash", "dash"} and "-c" in argv[1:-1]:
        out.extend(commands(argv[argv.index("-c") + 1], line))
        return
    out.append(Command(line, tuple(argv), tuple(redirects)))


def run_commands(ins: Instruction) -> list[Command | tuple[int, str]]:
    """The commands a RUN instruction executes. A heredoc fed to something other than a shell
    comes back as (line, body): data this reader cannot follow."""
    # RUN --mount=... --network=...: dropped, keeping their newlines so line numbers stay right
    text = re.sub(r"^(\s*--[a-z-]+=\S+\s+)+", lambda m: "\n" * m.group(0).count("\n"), ins.text)
    if text.lstrip().startswith("["):
        try:
            argv = json.loads(text)
        except json.JSONDecodeError as e:
            raise DockerfileError(f"line {ins.line}: RUN's exec form is not a JSON array ({e})") from e
        found: list[Command | tuple[int, str]] = []
        _flush(found, ins.line, [str(a) for a in argv], [])  # type: ignore[arg-type]
        return found
    if not ins.heredocs:
        return list(commands(text, ins.line))
    head = HEREDOC.sub("", text).strip()
    out: list[Command | tuple[int, str]] = list(commands(head, ins.line)) if head else []
    shells = {"sh", "bash", "dash"}
    head_cmd = head.split()[0].rsplit("/", 1)[-1] if head else ""
    for body_line, body in ins.heredocs:
        shebang = body.lstrip().split("\n", 1)[0] if body.lstrip().startswith("#!") else ""
        if (not head or head_cmd in shells) and (not shebang or any(s in shebang for s in shells)):
            out.extend(commands(body, body_line, newline_ends_command=True))
        else:
            out.append((body_line, body))
    return out

"""Command-line flags generated from typed configuration: a dataclass field that carries
`flag(...)` metadata becomes one argparse flag, with the field's docstring as its help.

    @dataclass(kw_only=True)
    class OptimConfig:
        lr: float = field(metadata=flag("--lr", required=True))
        \"\"\"Peak learning rate.\"\"\"

    add_flags(parser.add_argument_group("optimizer"), OptimConfig)   # --lr, help "Peak learning rate."
    OptimConfig(**values(OptimConfig, namespace))                    # back from the parsed flags

The type annotation decides how a flag parses: int, float, str, bool (a switch), a tuple
(several values). The component owns its defaults; `optional=True` makes every default None,
for flags whose value may come from elsewhere (a checkpoint's record) when not given.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any


def flag(name: str, *, required: bool = False, choices: Sequence[str] | None = None, parse: Callable | None = None,
         negate: str | None = None, metavar: str | None = None) -> dict[str, Any]:
    """Field metadata: the flag's name (Megatron-LM's where it has one), and how it parses.
    `negate`: a bool field defaulting True is switched off by this flag (--no-eval-at-start)."""
    return {"flag": name, "required": required, "choices": choices, "parse": parse, "negate": negate,
            "metavar": metavar}


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (attribute docstrings, as litgpt reads them)."""
    twin = getattr(cls, "__twin_of__", None)
    if twin is not None:
        return field_docs(twin)
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]  # a class's source parses to a ClassDef, which has .body
        except (OSError, TypeError):
            continue
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def positive(*pairs: tuple[str, int | None]) -> None:
    """Each (flag, value) given is at least 1, or one error naming the flag."""
    for name, value in pairs:
        if value is not None and value < 1:
            raise ValueError(f"{name} {value}: must be at least 1")


def check_iterations(name: str, iterations: tuple[int, ...], train_iters: int | None, *, first: int) -> None:
    """A list of iterations (--eval-iterations, --save-iterations): each in [first, train_iters], none twice."""
    for it in iterations:
        if it < first or (train_iters is not None and it > train_iters):
            upper = f" and --train-iters {train_iters}" if train_iters is not None else ""
            raise ValueError(f"{name} {it}: every iteration must lie between {first}{upper}")
    if len(set(iterations)) != len(iterations):
        raise ValueError(f"{name}: {list(iterations)} names an iteration twice")


def flag_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if "flag" in f.metadata]


def flag_names(cls: type) -> dict[str, str]:
    """Field name -> its flag."""
    return {f.name: f.metadata["flag"] for f in flag_fields(cls)}


def dest(f: dataclasses.Field) -> str:
    """The parsed namespace's attribute of a field's flag (unique across components, unlike field names)."""
    return f.metadata["flag"].lstrip("-").replace("-", "_")


def _kind(cls: type, f: dataclasses.Field) -> Any:
    """The field's type with None taken out of an Optional."""
    hint = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else hint
    if typing.get_origin(hint) is typing.Literal:  # its values are the flag's choices (also as an optional twin's)
        return type(typing.get_args(hint)[0])
    return hint


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def add_flags(group: argparse._ActionsContainer, cls: type, *, optional: bool = False,
              aliases: Callable[[str], Sequence[str]] | None = None) -> None:
    """One flag per flag-carrying field of `cls`, with the field's docstring as help; `aliases(flag)`:
    more spellings of it (an experiment's older names, say)."""
    docs = field_docs(cls)
    for f in flag_fields(cls):
        meta, kind, default = f.metadata, _kind(cls, f), None if optional else _default(f)
        names = (meta["flag"], *(aliases(meta["flag"]) if aliases else ()))
        help_ = docs.get(f.name, "")
        kw: dict[str, Any] = {"dest": dest(f), "help": help_ or None}
        if kind is bool:
            if meta["negate"]:
                group.add_argument(meta["negate"], action="store_false", **kw)
                continue
            group.add_argument(*names, action="store_true", default=None if optional else default, **kw)
            continue
        origin = typing.get_origin(kind)
        if origin in (tuple, list) and not meta["parse"]:
            item = (typing.get_args(kind) or (str,))[0]
            kw.update(nargs="+" if meta["required"] else "*", type=meta["parse"] or item)
        else:
            kw["type"] = meta["parse"] or kind
        if meta["choices"]:
            kw["choices"] = meta["choices"]
        if meta["metavar"]:
            kw["metavar"] = meta["metavar"]
        if meta["required"] and not optional:
            kw["required"] = True
        else:
            kw["default"] = default
        group.add_argument(*names, **kw)


def values(cls: type, ns: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of `cls`'s flags (sequences as tuples), keyed by field."""
    out = {}
    for f in flag_fields(cls):
        v = getattr(ns, dest(f))
        out[f.name] = tuple(v) if isinstance(v, list) else v
    return out


def optional_twin(cls: type, name: str, module: str) -> type:
    """A kw_only dataclass with `cls`'s flag fields, each typed `T | None` and defaulting to None:
    the flags a user gave, None where left out (for values another source, a checkpoint's
    record, supplies). Same flags and help as `cls`; `given(twin)` is what was given."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, hints[f.name] | None, dataclasses.field(default=None, metadata=f.metadata))
              for f in flag_fields(cls)]
    twin = dataclasses.make_dataclass(name, fields, kw_only=True, module=module)
    twin.__doc__ = f"{cls.__name__}'s flags as given (None: not given)."
    twin.__twin_of__ = cls  # type: ignore[attr-defined]  # a marker attribute on a class made at run time
    return twin


def given(obj: Any) -> dict[str, Any]:
    """The fields of an optional twin (or any dataclass) that were given: not None."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if getattr(obj, f.name) is not None}

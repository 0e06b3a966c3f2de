"""Completion records: an output of the recipe counts as done only when the record written after
it, last, says so and still matches it.

A step whose output is a folder or a set of files (the demo model and corpora, a dataset, the
converted base, an upscaled checkpoint, a Hugging Face export) gives its Command the `outputs` it
makes. After that command exits 0 the launcher writes `$WORKDIR/records/<key>.json` (atomically
and durably: durable.atomic_write): every file of every output with its size, the sha256 of
each file up to 1 MiB (configs, tokenizers, indices, checkpoint metadata), and the settings that
made them: the command's arguments, $WORKDIR written as `$WORKDIR` so a moved work folder still
matches. The datasets of a DATA_DIR outside $WORKDIR are recorded in `$DATA_DIR/records/` instead
(and locked in `$DATA_DIR/locks/`): jobs with other WORKDIRs share them, so a second job finds them
done, or waits for the one making them, and never clears them from under a job reading them.
`check` is the step's "done?":

    no output, no record                    to do (nothing said)
    an output without its record            one line, "... has no completion record ...: redoing it"
    files that differ from their record     one line, "... does not match its completion record ...: redoing it"
    a record made with other settings       refused: SettingsError naming the output, the record and the
                                            first setting that differs (nothing deleted)
    record and files agree                  done

Why other settings are refused, not redone: the output may be an hour of conversion the user
means to keep, and everything after it (the runs that started from it) was made from it; a
changed TP, model or tokenizer in the same $WORKDIR is far more often a mistake than a wish to
start over. The error says how to start over (delete the output and its record, or another
$WORKDIR). A missing or mismatching record, by contrast, is what a kill, a full disk or a crash
of the machine leaves: the output is redone, and the launcher removes what was left first
(`clear`, under the action's lock) since the tools refuse to overwrite an existing output.

Standard library only (the launcher runs without site-packages).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from megatron_scale.durable import atomic_write
from megatron_scale.recipe.settings import SettingsError

SMALL = 1 << 20
"""Files up to this size are recorded with their sha256 too (the rest by size)."""


def record_path(workdir: Path, key: str, home: Path | None = None) -> Path:
    """`home`/records/KEY.json: home is $WORKDIR, or the folder of outputs that jobs with other
    WORKDIRs share (a DATA_DIR outside it: layout.py's Layout.home)."""
    return Path(home or workdir) / "records" / f"{key}.json"


def _settings(workdir: Path, args: tuple[str, ...]) -> list[str]:
    w = str(Path(workdir))
    return [a.replace(w, "$WORKDIR") for a in args]


def _files(path: Path) -> dict[str, dict[str, Any]]:
    """{relative name: {size[, sha256]}} of a file or of every file under a folder."""
    found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    out = {}
    for f in found:
        size = f.stat().st_size
        entry: dict[str, Any] = {"size": size}
        if size <= SMALL:
            entry["sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
        out[f.relative_to(path).as_posix() if f != path else "."] = entry
    return out


def describe(workdir: Path, outputs: tuple[str, ...]) -> dict[str, Any]:
    return {_settings(workdir, (o,))[0]: _files(Path(o)) for o in outputs}


def write(workdir: Path, key: str, args: tuple[str, ...], outputs: tuple[str, ...], home: Path | None = None) -> Path:
    """The record of `outputs`, made by a command with `args`, written last (after they are whole)."""
    missing = [o for o in outputs if not Path(o).exists()]
    if missing:
        raise SettingsError(f"{key}: the step exited 0 but did not write {', '.join(missing)}")
    path = record_path(workdir, key, home)
    record = {"key": key, "settings": _settings(workdir, args), "outputs": describe(workdir, outputs)}
    atomic_write(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def _first_difference(recorded: dict[str, Any], now: dict[str, Any]) -> str:
    for name in sorted(set(recorded) | set(now)):
        for f in sorted(set(recorded.get(name, {})) | set(now.get(name, {}))):
            a, b = recorded.get(name, {}).get(f), now.get(name, {}).get(f)
            if a == b:
                continue
            where = name if f == "." else f"{name}/{f}"
            if a is None:
                return f"{where} is not in it"
            if b is None:
                return f"{where} is missing"
            if a.get("size") != b.get("size"):
                return f"{where} has {b.get('size')} bytes, recorded {a.get('size')}"
            return f"{where} differs from its recorded sha256"
    return "it lists other outputs"


def _setting_difference(recorded: list[str], now: list[str]) -> str:
    for i, (a, b) in enumerate(zip(recorded, now)):
        if a != b:
            flag = now[i - 1] if i and now[i - 1].startswith("--") else f"argument {i}"
            return f"{flag} {a} (recorded), {b} (now)"
    return f"recorded {' '.join(recorded)}; now {' '.join(now)}"


def check(workdir: Path, key: str, args: tuple[str, ...], outputs: tuple[str, ...],
          home: Path | None = None) -> tuple[bool, str]:
    """(done, what to say): done with its record; or to do, with the one line that says why
    ("" when nothing was there). Raises SettingsError on a record made with other settings."""
    path = record_path(workdir, key, home)
    present = [o for o in outputs if Path(o).exists() or Path(o).is_symlink()]
    names = ", ".join(present or outputs)
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict):
            raise ValueError("not an object")
    except FileNotFoundError:
        if not present:
            return False, ""
        return False, f"{names}: no completion record ({path}); left by a run that stopped while writing it? redoing it"
    except (OSError, ValueError) as e:
        return False, f"{path}: unreadable completion record ({e}); redoing {names}"
    if not present:  # nothing to keep: made again with this run's settings
        return False, f"{names}: recorded in {path} but missing; redoing it"
    now = _settings(workdir, args)
    if record.get("settings") != now:
        raise SettingsError(
            f"{names} was made with other settings than this run's ({path}: "
            f"{_setting_difference(record.get('settings') or [], now)}); to redo it with these, delete it and "
            f"that record, or set WORKDIR to another folder")
    got = describe(workdir, outputs)
    if record.get("outputs") != got:
        return False, (f"{names} does not match its completion record ({path}: "
                       f"{_first_difference(record.get('outputs') or {}, got)}); redoing it")
    return True, ""


def clear(workdir: Path, key: str, outputs: tuple[str, ...], home: Path | None = None) -> None:
    """Remove the record, then what is left of `outputs`, before they are made again (under the
    action's lock: nobody else is writing them)."""
    record_path(workdir, key, home).unlink(missing_ok=True)
    for o in map(Path, outputs):
        if o.is_dir() and not o.is_symlink():
            shutil.rmtree(o)
        elif o.exists() or o.is_symlink():
            os.unlink(o)

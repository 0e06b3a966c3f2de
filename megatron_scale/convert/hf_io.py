"""Hugging Face folders on disk: lazy safetensors reading, sharded writing, atomic publishing.

Weights are read only from safetensors (one `model.safetensors`, or shards listed by
`model.safetensors.index.json`), tensor by tensor through `safe_open`: never torch.load, never a
pickle. A folder is written into a temporary sibling and renamed into place at the end, so an
interrupted export never leaves a folder that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from megatron_scale.durable import disk_full, durable_replace, fsync_tree
from megatron_scale.convert.hf_config import ConversionError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "generation_config.json", "chat_template.jinja", "vocab.json", "merges.txt",
)


class SafetensorsReader:
    """Tensors of an HF folder by name, read one at a time."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        index, single = self.folder / INDEX, self.folder / SINGLE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as e:
                raise ConversionError(f"{index}: not a safetensors index (no 'weight_map'): {e}") from e
            self.files = {name: self.folder / f for name, f in weight_map.items()}
        elif single.is_file():
            with safe_open(str(single), framework="pt") as f:
                self.files = {name: single for name in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
        else:
            pickles = sorted(p.name for p in self.folder.glob("*.bin")) if self.folder.is_dir() else []
            hint = f" (found {pickles}: pickled weights are never read; convert them to safetensors)" if pickles else ""
            raise ConversionError(f"{self.folder}: no {SINGLE} or {INDEX}{hint}")
        self._open: dict[Path, Any] = {}

    def names(self) -> list[str]:
        return sorted(self.files)

    def _handle(self, name: str) -> Any:
        if name not in self.files:
            raise ConversionError(f"{self.folder}: tensor {name!r} is missing from the checkpoint")
        path = self.files[name]
        if path not in self._open:
            if not path.is_file():
                raise ConversionError(f"{path}: shard listed in {INDEX} does not exist")
            self._open[path] = safe_open(str(path), framework="pt")
        return self._open[path]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._handle(name).get_slice(name).get_shape())

    def get(self, name: str) -> torch.Tensor:
        return self._handle(name).get_tensor(name)


@dataclass
class ShardSummary:
    """What a sharded write produced."""

    files: list[str] = field(default_factory=list)
    parameters: int = 0
    bytes: int = 0
    dtypes: set[str] = field(default_factory=set)


def write_shards(
    tensors: Iterable[tuple[str, torch.Tensor]], folder: Path, max_shard_bytes: int = 5 * 2**30,
) -> ShardSummary:
    """Write `model-0000i-of-0000N.safetensors` shards (each up to max_shard_bytes unless one
    tensor is larger) and their index into `folder`. Tensors are copied out of any shared storage."""
    summary = ShardSummary()
    weight_map: dict[str, int] = {}
    pending: dict[str, torch.Tensor] = {}
    size = 0

    def flush() -> None:
        nonlocal pending, size
        if pending:
            save_file(pending, str(folder / f"shard-{len(summary.files)}.tmp"), metadata={"format": "pt"})
            summary.files.append(f"shard-{len(summary.files)}.tmp")
            pending, size = {}, 0

    for name, t in tensors:
        if name in weight_map or name in pending:
            raise ConversionError(f"tensor {name!r} written twice")
        nbytes = t.numel() * t.element_size()
        if pending and size + nbytes > max_shard_bytes:
            flush()
        pending[name] = t.detach().clone(memory_format=torch.contiguous_format)
        weight_map[name] = len(summary.files)
        size += nbytes
        summary.parameters += t.numel()
        summary.bytes += nbytes
        summary.dtypes.add(str(t.dtype).removeprefix("torch."))
    flush()
    n = len(summary.files)
    final = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    for tmp, name in zip(summary.files, final, strict=True):
        (folder / tmp).rename(folder / name)
    summary.files = final
    index = {"metadata": {"total_size": summary.bytes}, "weight_map": {k: final[i] for k, i in sorted(weight_map.items())}}
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return summary


def copy_tokenizer(source: str | os.PathLike, folder: Path) -> list[str]:
    """Copy the tokenizer files of an HF folder (--tokenizer); at least one must exist."""
    src = Path(source)
    if not src.is_dir():
        raise ConversionError(f"--tokenizer {src}: not a directory")
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, folder / name)
            copied.append(name)
    if not copied:
        raise ConversionError(f"--tokenizer {src}: none of {', '.join(TOKENIZER_FILES)} found")
    return copied


@contextmanager
def atomic_folder(target: str | os.PathLike, force: bool) -> Iterator[Path]:
    """Yield a temporary folder beside `target`; on success it becomes `target` (replacing an
    existing one only with force), on failure it is removed."""
    out = Path(target)
    if out.exists() and not force:
        raise ConversionError(f"{out} exists; refusing to overwrite it without --force")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        yield tmp
    except BaseException as e:
        full = None if isinstance(e, (ConversionError, KeyboardInterrupt)) else disk_full(e, tmp)  # before the
        shutil.rmtree(tmp, ignore_errors=True)                                          # removal frees space
        if full is not None:
            raise ConversionError(f"writing {out} failed: {full}; the partial folder {tmp.name} was removed and "
                                  f"nothing was renamed" + (f" ({out} is as it was)" if out.exists() else "")) from e
        raise
    fsync_tree(tmp)  # durable before it counts: a crash of the machine leaves no renamed, empty folder
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    durable_replace(tmp, out, synced=True)
    if old is not None:
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def write_json(path: Path, record: dict[str, Any]) -> None:
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

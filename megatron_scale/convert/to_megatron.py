"""Hugging Face Llama folder -> megatron-core dist checkpoint (torch_dist) at a TP x PP layout.

    convert_hf_to_megatron("Llama-3.2-1B/", "ckpt/base", tp=2, pp=1)

Everything that can be checked is checked before any rank starts: config.json (keymap's
architecture limits, RoPE), the layout (TP divides heads, groups, FFN and vocabulary; PP divides
the layers), and every HF tensor's presence and shape. Each rank then builds its partition of the
megatron-core model and fills it lazily: a megatron tensor is assembled from the HF tensors of
the one layer a shard needs (merge_qkv, [gate; up]), read through safe_open. The checkpoint
records the model arguments (common state `model_args`, model_args.py) and is written by
checkpoint.save_checkpoint (atomic rename).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from megatron_scale.checkpoint.io import save_checkpoint
from megatron_scale.convert import keymap
from megatron_scale.convert.hf_io import SafetensorsReader
from megatron_scale.launch import on_ranks
from megatron_scale.convert.hf_config import ConversionError, conversion_errors, check_parallel, read_hf_config, with_dtype
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.build import Parallel, build_model
from megatron_scale.methods import Full
from megatron_scale.model.weights.state import load_global_state_dict

# HF tensors that carry no weights megatron-core needs (recomputed buffers).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def check_hf_tensors(reader: SafetensorsReader, args: LlamaArgs) -> None:
    """Every tensor the model needs is there with its shape, and nothing unexplained is."""
    expected = keymap.hf_shapes(args)
    for name, shape in expected.items():
        got = reader.shape(name)
        if got != shape:
            raise ConversionError(
                f"{reader.files[name]}: tensor {name!r} has shape {got}, config.json implies {shape}"
            )
    extra = [
        n for n in reader.names()
        if n not in expected and not n.endswith(IGNORED_SUFFIXES) and not (args.tied and n == "lm_head.weight")
    ]
    if extra:
        raise ConversionError(
            f"{reader.folder}: {len(extra)} tensor(s) this Llama config does not explain, first: {extra[:3]}"
        )


def hf_tokenizer_size(folder: str | os.PathLike) -> tuple[Path, int] | None:
    """(file, the number of token ids) of the folder's tokenizer: tokenizer.json's largest id + 1
    (added tokens included), else tokenizer.model's pieces; None where the folder has neither."""
    path = Path(folder)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        file = path / "tokenizer.json"
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as e:  # noqa: BLE001 (the tokenizers library raises plain Exceptions)
            raise ConversionError(f"{file}: not a Hugging Face tokenizer.json ({e})") from e
        ids = tok.get_vocab(with_added_tokens=True).values()
        return file, max(tok.get_vocab_size(with_added_tokens=True), max(ids, default=-1) + 1)
    if (path / "tokenizer.model").is_file():
        import sentencepiece

        file = path / "tokenizer.model"
        try:
            return file, sentencepiece.SentencePieceProcessor(model_file=str(file)).get_piece_size()
        except (OSError, RuntimeError) as e:
            raise ConversionError(f"{file}: not a SentencePiece model ({e})") from e
    return None


def check_hf_tokenizer(folder: str | os.PathLike, args: LlamaArgs) -> None:
    """The folder's tokenizer has no id past the embedding's vocab_size rows (config.json)."""
    found = hf_tokenizer_size(folder)
    if found is not None and found[1] > args.vocab_size:
        file, n = found
        raise ConversionError(f"{file} has {n} token ids but config.json's vocab_size (the embedding's rows) is "
                              f"{args.vocab_size}: ids from {args.vocab_size} on would index past the embedding")


class _LazyTensor:
    """A global megatron tensor that materialises only the layer (and slice) indexed."""

    def __init__(self, entry: keymap.Entry, reader: SafetensorsReader, args: LlamaArgs, bar: Any) -> None:
        self.entry, self.reader, self.args, self.bar = entry, reader, args, bar
        self.shape = torch.Size(keymap.megatron_shapes(args)[entry.megatron])

    def __getitem__(self, index: tuple) -> torch.Tensor:
        layer = index[0] if self.entry.stacked else None
        rest = index[1:] if self.entry.stacked else index
        parts = tuple(self.reader.get(n) for n in keymap.hf_names(self.entry, layer))
        self.bar.update(len(parts))
        return keymap.to_megatron(self.entry, parts, self.args)[rest].to(self.args.torch_dtype)


class LazyMegatronState(Mapping):
    """Megatron checkpoint key -> lazily read global tensor (for load_global_state_dict)."""

    def __init__(self, reader: SafetensorsReader, args: LlamaArgs, bar: Any) -> None:
        self.tensors = {e.megatron: _LazyTensor(e, reader, args, bar) for e in keymap.table(args)}

    def __getitem__(self, key: str) -> Any:
        return self.tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def _convert_rank(hf_dir: str, out_dir: str, args: LlamaArgs, tp: int, pp: int, progress: bool, *,
                  device: torch.device) -> None:
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    reader = SafetensorsReader(hf_dir)
    model = build_model(args, Full(), Parallel(tp=tp, pp=pp)).to(device)
    with tqdm(desc="reading HF tensors", unit="tensor", disable=not (progress and rank0)) as bar:
        load_global_state_dict(model, LazyMegatronState(reader, args, bar))  # type: ignore[arg-type]  # LazyMegatronState is a Mapping that loads tensors on access, not a dict
    save_checkpoint(model, out_dir, method=Full(), model_args=args.to_json())


@conversion_errors()
def convert_hf_to_megatron(
    hf_dir: str | os.PathLike, out_dir: str | os.PathLike, *, tp: int = 1, pp: int = 1,
    dtype: str | None = None, progress: bool = True,
) -> dict[str, Any]:
    """Convert and return a summary (model args, parameters, dtype, layout)."""
    args = read_hf_config(hf_dir)
    if dtype is not None:
        args = with_dtype(args, dtype)
    check_parallel(args, tp, pp)
    if args.vocab_size % tp:
        raise ConversionError(
            f"--tensor-model-parallel-size {tp} does not divide vocab_size={args.vocab_size} "
            "(the vocabulary is split evenly over tensor-parallel ranks)"
        )
    check_hf_tensors(SafetensorsReader(hf_dir), args)
    check_hf_tokenizer(hf_dir, args)
    out = Path(out_dir)
    if out.exists():
        raise ConversionError(f"{out} exists; refusing to overwrite a checkpoint")
    on_ranks(_convert_rank, tp, pp, str(hf_dir), str(out), args, tp, pp, progress)
    parameters = sum(math.prod(s) for s in keymap.megatron_shapes(args).values())
    return {"output": str(out), "model_args": args.to_json(), "parameters": parameters,
            "dtype": args.params_dtype, "tensor_parallel": tp, "pipeline_parallel": pp}

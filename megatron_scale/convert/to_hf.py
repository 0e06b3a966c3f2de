"""megatron-core dist checkpoint (any TP/PP) -> Hugging Face folder.

    convert_megatron_to_hf("ckpt/base", "hf/out", tokenizer="Llama-3.2-1B/", verify=True)

A plain Llama checkpoint becomes a standard `LlamaForCausalLM` folder: config.json, safetensors
shards with their index, the tokenizer files when asked. A SCALE checkpoint becomes the SCALE
model with its own modeling code (scale_export.py); with `preserve_head_only`, the
preservation head alone as a plain LlamaForCausalLM of the base shape (possible only where no
W12 has moved the base path: Preserve and Route-on-Preserve always, Adapt while its W12 are zero);
with `fused_view`, the adaptation head as a Llama of the whole width whose norms are split, the
view serving engines load (fused_view.py; Preserve and Adapt, ungated).
The folder is written beside the target and renamed into place (atomic); an existing target is
replaced only with `force`. `verify` compares the two models' logits before publishing.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from megatron_scale.scale_config import RouterOverride, ScaleConfigError, ScaleDims
from megatron_scale.convert import fused_view as fused
from megatron_scale.convert import keymap, scale_export
from megatron_scale.convert import verify as verifier
from megatron_scale.convert.hf_io import (
    ShardSummary,
    atomic_folder,
    copy_tokenizer,
    write_json,
    write_shards,
)
from megatron_scale.checkpoint.reader import MegatronReader
from megatron_scale.data.tokenizer import TokenFile
from megatron_scale.methods import Scale, TrainingMethod, recorded_method
from megatron_scale.model.args import DTYPES, LlamaArgs
from megatron_scale.convert.hf_config import ConversionError, conversion_errors, to_hf_config, with_dtype

DEFAULT_SHARD_BYTES = 5 * 2**30


def _cast(items: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype, bar: Any) -> Iterator[tuple[str, torch.Tensor]]:
    for name, t in items:
        bar.update(1)
        yield name, t.to(dtype)


def _out_dtype(reader: MegatronReader, dtype: str | None) -> str:
    if dtype is None:
        saved = reader.meta["embedding.word_embeddings.weight"].dtype
        return next(n for n, d in DTYPES.items() if d == saved)
    if dtype not in DTYPES:
        raise ConversionError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return dtype


def _check_preservable(reader: MegatronReader) -> None:
    for key in reader.names():
        if ".weight_12" in key and bool(reader.get(key).any()):
            raise ConversionError(
                f"--preserve-head-only: {reader.dir} has a non-zero W12 ({key!r}), which changes the "
                "base path: its preservation head is not a plain Llama; export the full SCALE model"
            )


def summarize(summary: ShardSummary, out: Path, args: LlamaArgs, kind: str, dtype: str) -> dict[str, Any]:
    return {"output": str(out), "kind": kind, "parameters": summary.parameters, "dtype": dtype,
            "shards": len(summary.files), "bytes": summary.bytes, "tied": args.tied}


def export_plain(reader: MegatronReader, method: TrainingMethod, args: LlamaArgs, tmp: Path, dtype: str,
                 max_shard_bytes: int, progress: bool) -> ShardSummary:
    """The plain Llama model the checkpoint exports as (method.exported_tensor: LoRA's adapters merged)."""
    reader.check_shapes(keymap.megatron_shapes(args))
    total = len(keymap.hf_shapes(args))
    with tqdm(total=total, desc="writing HF tensors", unit="tensor", disable=not progress) as bar:
        items = keymap.megatron_to_hf(lambda key: method.exported_tensor(reader, key), args)
        summary = write_shards(_cast(items, DTYPES[dtype], bar), tmp, max_shard_bytes)
    write_json(tmp / "config.json", to_hf_config(with_dtype(args, dtype)))
    return summary


def router_override(dims: ScaleDims | None, route: RouterOverride, preserve_head_only: bool, where: Any,
                    fused_view: bool = False) -> ScaleDims | None:
    """The recorded geometry with the router settings `route` gives (--route-*) in place of its
    own (only a Route model exported with both heads routes)."""
    given = route.given_flags("--route-")
    if not given:
        return dims
    flag = given[0]
    if dims is None or dims.variant != "route" or preserve_head_only or fused_view:
        as_ = ("its preservation head" if preserve_head_only else "its fused view (z_a)" if fused_view
               else "scale-" + dims.variant) if dims is not None else ""
        raise ConversionError(f"{flag}: only a SCALE-Route checkpoint exported with both heads routes; {where} "
                              f"is {'not a SCALE checkpoint' if dims is None else 'exported as ' + as_}")
    try:
        router = route.over(dims.router).check("--route-")
    except ScaleConfigError as e:
        raise ConversionError(str(e)) from e
    return dims.with_router(router)


@conversion_errors()
def convert_megatron_to_hf(
    ckpt_dir: str | os.PathLike, out_dir: str | os.PathLike, *, force: bool = False,
    tokenizer: str | os.PathLike | None = None, verify: bool = False, tolerance: float | None = None,
    dtype: str | None = None, model_args: str | os.PathLike | None = None,
    preserve_head_only: bool = False, max_shard_bytes: int = DEFAULT_SHARD_BYTES, progress: bool = True,
    route: RouterOverride = RouterOverride(), fused_view: bool = False,
) -> dict[str, Any]:
    """Export and return a summary (parameters, dtype, shards, verification error and tolerance).
    `tolerance` None: verify.tolerance (scaled by the logits' magnitude); a number: that bound. A
    Route checkpoint's router default (tau, statistic, direction, unit) goes into config.json unless
    `route` (--route-*) overrides it; with a byte-level `tokenizer`, so do the token codes a char or word unit needs.
    `fused_view`: the fused view (fused_view.py) instead of the SCALE model."""
    reader = MegatronReader(ckpt_dir)
    args = reader.model_args(model_args)
    method = recorded_method(reader.records)
    if fused_view and preserve_head_only:
        raise ConversionError("--fused-view and --preserve-head-only: choose one (z_a or z_p)")
    dims = router_override(method.scale_dims, route, preserve_head_only, reader.dir, fused_view)
    scale = None if dims is None else Scale(dims=dims)  # the geometry with its router override: what it routes by
    method = scale or method
    if (preserve_head_only or fused_view) and dims is None:
        flag = "--fused-view" if fused_view else "--preserve-head-only"
        raise ConversionError(f"{flag}: {reader.dir} is not a SCALE checkpoint")
    if fused_view:
        fused.check_fusable(dims, reader.dir)
    try:  # a Route export carries the codes a char or word unit needs (config.json's scale_router_unit_codes)
        codes = None if scale is None or preserve_head_only else scale.route_codes(TokenFile(tokenizer), args.vocab_size)
    except ValueError as e:
        raise ConversionError(str(e)) from e
    out_dtype = _out_dtype(reader, dtype)
    with atomic_folder(out_dir, force) as tmp:
        if fused_view:
            summary = fused.export_fused(reader, args, dims, tmp, out_dtype, max_shard_bytes, progress)
            kind = f"scale-{dims.variant} fused view (adaptation head)"
        elif dims is not None and not preserve_head_only:
            summary = scale_export.export_scale(
                reader, args, dims, tmp, out_dtype, max_shard_bytes, progress,
                None if codes is None else base64.b64encode(codes.numpy().tobytes()).decode("ascii"))
            kind = f"scale-{dims.variant}"
        else:
            if dims is not None:
                _check_preservable(reader)
            summary = export_plain(reader, method, args, tmp, out_dtype, max_shard_bytes, progress)
            kind = "llama (preservation head)" if dims is not None else method.exported_as
        if tokenizer is not None:
            copy_tokenizer(tokenizer, tmp)
        result = summarize(summary, Path(out_dir), args, kind, out_dtype)
        if verify:
            err, scaled = verifier.compare(
                str(reader.dir), str(tmp), args, method,
                head="preserve" if preserve_head_only else "adapt" if fused_view else "auto",
                trust_remote_code=dims is not None and not preserve_head_only, dtype=DTYPES[out_dtype],
                unit_codes=codes,
            )
            bound = scaled if tolerance is None else tolerance
            result["verify_max_abs_error"], result["verify_tolerance"] = err, bound
            if not err <= bound:
                why = "--verify-tolerance" if tolerance is not None else f"{out_dtype} export, scaled by the largest logit"
                raise ConversionError(
                    f"--verify: exported logits differ from {reader.dir}'s by {err:.3g}, above the tolerance "
                    f"{bound:.3g} ({why}); nothing was written"
                )
    return result

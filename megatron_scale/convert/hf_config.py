"""Hugging Face config.json <-> the architecture record (model/args.py LlamaArgs), and the error
every conversion input reports (ConversionError; `conversion_errors` makes a checkpoint that
cannot be read, megatron_scale/checkpoint/'s CheckpointError, and a bad input a rank stopped on,
launch.py's RankError, one at conversion's edge).

    config.json (HF)  --from_hf_config-->  LlamaArgs  --to_hf_config-->  config.json

RoPE: megatron-core fixes low_freq_factor 1, high_freq_factor 4 and an original context of 8192 for
Llama 3.x scaling (RotaryEmbedding._apply_scaling). Those are Llama 3.1/3.2's values; a config.json
with others is refused rather than converted into a model that computes differently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint.records import CheckpointError
from megatron_scale.launch import RankError
from megatron_scale.model.args import DTYPES, LlamaArgs

# megatron-core 0.19.2 RotaryEmbedding._apply_scaling defaults (not settable through GPTModel).
MCORE_LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# HF config fields we do not interpret but carry through a round trip.
CARRIED = ("bos_token_id", "eos_token_id", "pad_token_id", "initializer_range")


class ConversionError(ValueError):
    """Bad conversion input; the message names the file, key or flag."""


@contextlib.contextmanager
def conversion_errors() -> Iterator[None]:
    """Conversion's edge (its public functions are wrapped in it): a checkpoint that cannot be
    read, or a bad input a rank stopped on, is a ConversionError with the same message."""
    try:
        yield
    except (CheckpointError, RankError) as e:
        raise ConversionError(str(e)) from e


def with_dtype(args: LlamaArgs, dtype: str) -> LlamaArgs:
    if dtype not in DTYPES:
        raise ConversionError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return dataclasses.replace(args, params_dtype=dtype)


def check_parallel(args: LlamaArgs, tp: int, pp: int) -> None:
    """One clear error when the layout cannot hold this model."""
    if tp < 1 or pp < 1:
        raise ConversionError(f"--tensor-model-parallel-size {tp} / --pipeline-model-parallel-size {pp} must be >= 1")
    for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size"):
        if getattr(args, name) % tp:
            raise ConversionError(f"--tensor-model-parallel-size {tp} does not divide {name}={getattr(args, name)}")
    if args.num_layers % pp:
        raise ConversionError(f"--pipeline-model-parallel-size {pp} does not divide num_layers={args.num_layers}")



def from_hf_config(cfg: dict[str, Any], where: str = "config.json") -> LlamaArgs:
    def need(key: str) -> Any:
        if key not in cfg:
            raise ConversionError(f"{where}: missing key {key!r}")
        return cfg[key]

    model_type = cfg.get("model_type")
    if model_type != "llama":
        raise ConversionError(f"{where}: model_type {model_type!r} is not supported (only 'llama')")
    for key, ok in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False)):
        if cfg.get(key, ok) != ok:
            raise ConversionError(f"{where}: {key}={cfg[key]!r} is not supported (Llama needs {ok!r})")
    hidden, heads = int(need("hidden_size")), int(need("num_attention_heads"))
    rope = _hf_rope(cfg, where)
    dtype = cfg.get("dtype", cfg.get("torch_dtype")) or "float32"
    if dtype not in DTYPES:
        raise ConversionError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return LlamaArgs(
        num_layers=int(need("num_hidden_layers")), hidden_size=hidden, num_attention_heads=heads,
        num_query_groups=int(cfg.get("num_key_value_heads") or heads),
        ffn_hidden_size=int(need("intermediate_size")),
        kv_channels=int(cfg.get("head_dim") or hidden // heads), vocab_size=int(need("vocab_size")),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        norm_epsilon=float(cfg.get("rms_norm_eps", 1e-6)),
        untie_embeddings_and_output_weights=not cfg.get("tie_word_embeddings", False),
        params_dtype=dtype, hf_carry={k: cfg[k] for k in CARRIED if k in cfg}, **rope,
    )

def to_hf_config(args: LlamaArgs) -> dict[str, Any]:
    """config.json of the equivalent LlamaForCausalLM. RoPE goes in the long-standing keys
    `rope_theta` / `rope_scaling`, which transformers 4.x reads and 5.x converts."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "num_hidden_layers": args.num_layers, "hidden_size": args.hidden_size,
        "num_attention_heads": args.num_attention_heads, "num_key_value_heads": args.num_query_groups,
        "intermediate_size": args.ffn_hidden_size, "head_dim": args.kv_channels,
        "vocab_size": args.vocab_size, "max_position_embeddings": args.max_position_embeddings,
        "rms_norm_eps": args.norm_epsilon, "tie_word_embeddings": args.tied,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "attention_dropout": 0.0, "rope_theta": args.rotary_base, "dtype": args.params_dtype,
        "use_cache": True,
    }
    if args.rope_scaling:
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": args.rope_scaling_factor, **MCORE_LLAMA3_FIXED}
    cfg.update(args.hf_carry)
    return cfg



def _hf_rope(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """rotary_base / rope_scaling / rope_scaling_factor from either config.json style:
    transformers 5 `rope_parameters`, or `rope_theta` + `rope_scaling` (4.x, Llama 3.x releases)."""
    params = dict(cfg.get("rope_parameters") or {})
    legacy = cfg.get("rope_scaling") or {}
    key = "rope_parameters" if params else "rope_scaling"
    params = {**legacy, **params}
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    if params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ConversionError(f"{where}: partial_rotary_factor != 1 is not supported")
    if kind == "default":
        return {"rotary_base": float(theta), "rope_scaling": False}
    if kind != "llama3":
        raise ConversionError(f"{where}: {key}.rope_type {kind!r} is not supported (default or llama3)")
    for name, fixed in MCORE_LLAMA3_FIXED.items():
        if float(params.get(name, fixed)) != fixed:
            raise ConversionError(
                f"{where}: {key}.{name}={params[name]} is not supported: megatron-core "
                f"{mc.MCORE_VERSION} fixes it at {fixed} (Llama 3.1/3.2's value)"
            )
    if "factor" not in params:
        raise ConversionError(f"{where}: {key} of rope_type llama3 has no 'factor'")
    return {"rotary_base": float(theta), "rope_scaling": True, "rope_scaling_factor": float(params["factor"])}


def read_hf_config(folder: str | Path) -> LlamaArgs:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ConversionError(f"{path}: no config.json in the Hugging Face folder")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConversionError(f"{path}: not valid JSON ({e})") from e
    return from_hf_config(cfg, where=str(path))

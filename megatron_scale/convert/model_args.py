"""The model arguments a converted checkpoint needs to be rebuilt: `LlamaArgs`.

A megatron-core checkpoint holds tensors, not the architecture. Conversion records the Llama
arguments next to the tensors (the checkpoint's common state, key `model_args`), under
Megatron-LM's flag names, so training, upscaling and export rebuild the same model:

    config.json (HF)  --from_hf_config-->  LlamaArgs  --to_hf_config-->  config.json
                                              |
                           transformer_config(tp, pp) + gpt_kwargs()  ->  megatron-core GPTModel

RoPE: megatron-core 0.19.2's GPTModel takes `rotary_base`, `rope_scaling` (Llama 3.x scaling on or
off) and `rope_scaling_factor`; low_freq_factor 1, high_freq_factor 4 and an original context of
8192 are fixed inside it (RotaryEmbedding._apply_scaling). Those are Llama 3.1/3.2's values; a
config.json with others is refused rather than converted into a model that computes differently.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from megatron_scale import _mcore as mc

# megatron-core 0.19.2 RotaryEmbedding._apply_scaling defaults (not settable through GPTModel).
MCORE_LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# HF config fields we do not interpret but carry through a round trip.
CARRIED = ("bos_token_id", "eos_token_id", "pad_token_id", "initializer_range")


class ConversionError(ValueError):
    """Bad conversion input; the message names the file, key or flag."""


@dataclass(kw_only=True, frozen=True)
class LlamaArgs:
    """A Llama-family model's architecture, in Megatron-LM flag names (--num-layers, ...)."""

    num_layers: int
    """Transformer layers (HF num_hidden_layers)."""
    hidden_size: int
    """Residual width d."""
    num_attention_heads: int
    """Query heads h."""
    num_query_groups: int
    """KV groups g (HF num_key_value_heads)."""
    ffn_hidden_size: int
    """SwiGLU width f (HF intermediate_size)."""
    kv_channels: int
    """Head size k (HF head_dim)."""
    vocab_size: int
    """Rows of the embedding and output tables."""
    max_position_embeddings: int
    """Longest context the model was configured for."""
    rotary_base: float
    """RoPE theta (HF rope_theta)."""
    rope_scaling: bool = False
    """Llama 3.x RoPE frequency scaling (HF rope_type llama3)."""
    rope_scaling_factor: float = 8.0
    """Llama 3.x scaling factor (HF rope factor); used when rope_scaling."""
    norm_epsilon: float = 1e-5
    """RMSNorm epsilon (HF rms_norm_eps)."""
    untie_embeddings_and_output_weights: bool = True
    """False when the output layer is the input embedding (HF tie_word_embeddings)."""
    params_dtype: str = "float32"
    """Dtype of the weights: float32 | bfloat16 | float16."""
    hf_carry: dict[str, Any] = field(default_factory=dict)
    """HF config fields carried unchanged through a round trip (token ids, ...)."""

    @property
    def tied(self) -> bool:
        return not self.untie_embeddings_and_output_weights

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.params_dtype]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str = "model_args") -> LlamaArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(record) - names)
        if unknown:
            raise ConversionError(f"{where}: unknown model argument(s) {unknown}")
        try:
            return cls(**record)
        except TypeError as e:
            raise ConversionError(f"{where}: {e}") from e

    def with_dtype(self, dtype: str) -> LlamaArgs:
        if dtype not in DTYPES:
            raise ConversionError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
        return dataclasses.replace(self, params_dtype=dtype)

    def check_parallel(self, tp: int, pp: int) -> None:
        """One clear error when the layout cannot hold this model."""
        if tp < 1 or pp < 1:
            raise ConversionError(f"--tensor-model-parallel-size {tp} / --pipeline-model-parallel-size {pp} must be >= 1")
        for name, value in (("num_attention_heads", self.num_attention_heads),
                            ("num_query_groups", self.num_query_groups), ("ffn_hidden_size", self.ffn_hidden_size)):
            if value % tp:
                raise ConversionError(
                    f"--tensor-model-parallel-size {tp} does not divide {name}={value}"
                )
        if self.num_layers % pp:
            raise ConversionError(
                f"--pipeline-model-parallel-size {pp} does not divide num_layers={self.num_layers}"
            )

    def transformer_config(self, tp: int = 1, pp: int = 1, *, initialize: bool = False) -> Any:
        """megatron-core TransformerConfig of this Llama model at TP/PP (CPU-initialised, no
        dropout; `initialize=False` skips the random init a converter overwrites anyway)."""
        dtype = self.torch_dtype
        return mc.TransformerConfig(
            num_layers=self.num_layers, hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads, num_query_groups=self.num_query_groups,
            ffn_hidden_size=self.ffn_hidden_size, kv_channels=self.kv_channels,
            normalization="RMSNorm", layernorm_epsilon=self.norm_epsilon, gated_linear_unit=True,
            activation_func=F.silu, add_bias_linear=False, bias_activation_fusion=False,
            hidden_dropout=0.0, attention_dropout=0.0, use_cpu_initialization=True,
            perform_initialization=initialize, params_dtype=dtype, pipeline_dtype=dtype,
            bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        )

    def gpt_kwargs(self) -> dict[str, Any]:
        """GPTModel keyword arguments (besides config and spec)."""
        return {
            "vocab_size": self.vocab_size, "max_sequence_length": self.max_position_embeddings,
            "position_embedding_type": "rope", "rotary_base": self.rotary_base,
            "rope_scaling": self.rope_scaling, "rope_scaling_factor": self.rope_scaling_factor,
            "share_embeddings_and_output_weights": self.tied,
        }

    # ---- Hugging Face config.json ----

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], where: str = "config.json") -> LlamaArgs:
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
        return cls(
            num_layers=int(need("num_hidden_layers")), hidden_size=hidden, num_attention_heads=heads,
            num_query_groups=int(cfg.get("num_key_value_heads") or heads),
            ffn_hidden_size=int(need("intermediate_size")),
            kv_channels=int(cfg.get("head_dim") or hidden // heads), vocab_size=int(need("vocab_size")),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            norm_epsilon=float(cfg.get("rms_norm_eps", 1e-6)),
            untie_embeddings_and_output_weights=not cfg.get("tie_word_embeddings", False),
            params_dtype=dtype, hf_carry={k: cfg[k] for k in CARRIED if k in cfg}, **rope,
        )

    def to_hf_config(self) -> dict[str, Any]:
        """config.json of the equivalent LlamaForCausalLM. RoPE goes in the long-standing keys
        `rope_theta` / `rope_scaling`, which transformers 4.x reads and 5.x converts."""
        cfg: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "num_hidden_layers": self.num_layers, "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_query_groups,
            "intermediate_size": self.ffn_hidden_size, "head_dim": self.kv_channels,
            "vocab_size": self.vocab_size, "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.norm_epsilon, "tie_word_embeddings": self.tied,
            "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
            "attention_dropout": 0.0, "rope_theta": self.rotary_base, "dtype": self.params_dtype,
            "use_cache": True,
        }
        if self.rope_scaling:
            cfg["rope_scaling"] = {"rope_type": "llama3", "factor": self.rope_scaling_factor, **MCORE_LLAMA3_FIXED}
        cfg.update(self.hf_carry)
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
    return LlamaArgs.from_hf_config(cfg, where=str(path))

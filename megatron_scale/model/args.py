"""The architecture of a Llama-family model: `LlamaArgs`, the one record of it.

It is what a checkpoint records (common state, key `model_args`), what the training flags describe
(Megatron-LM's names: each field's flag is in its metadata), what HF conversion maps config.json
to (convert/hf_config.py), and the only place a megatron-core `TransformerConfig` and the GPTModel
keyword arguments are made:

    flags / config.json / checkpoint record  ->  LlamaArgs  ->  transformer_config(...) + gpt_kwargs(...)

RoPE: megatron-core 0.19.2's GPTModel takes `rotary_base`, `rope_scaling` (Llama 3.x scaling on or
off) and `rope_scaling_factor`; low_freq_factor 1, high_freq_factor 4 and an original context of
8192 are fixed inside it (RotaryEmbedding._apply_scaling).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from megatron_scale import _mcore as mc
from megatron_scale.flags import flag, flag_names

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The four sizes a model cannot do without; the other fields have a default or derive from these.
REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")


CROSS_ENTROPY_IMPLS = ("native", "te")
CUDA_GRAPH_IMPLS = ("none", "full_iteration")


@dataclass(kw_only=True, frozen=True)
class Fusions:
    """megatron-core's kernel fusions (Megatron-LM's flags), the same for every method."""

    rope: bool = False
    """--apply-rope-fusion: RoPE through Transformer Engine's fused kernel (needs TE)."""
    swiglu: bool = False
    """--bias-swiglu-fusion: megatron-core's fused SwiGLU (bias_swiglu_impl; TransformerConfig's
    bias_activation_fusion). SCALE's one-node TE MLP runs TE's SwiGLU either way."""
    cross_entropy: bool = False
    """--cross-entropy-loss-fusion: megatron-core's fused vocab-parallel cross-entropy."""
    cross_entropy_impl: str = "native"
    """--cross-entropy-fusion-impl: native (megatron-core's) | te, refused as Megatron-LM refuses it."""

    def check(self) -> None:
        if self.cross_entropy_impl not in CROSS_ENTROPY_IMPLS:
            raise ArchitectureError(f"--cross-entropy-fusion-impl {self.cross_entropy_impl!r}: choose one of "
                                    f"{CROSS_ENTROPY_IMPLS}")
        if self.cross_entropy and self.cross_entropy_impl == "te":
            raise ArchitectureError("--cross-entropy-fusion-impl te: Transformer Engine's cross-entropy fusion is "
                                    "disabled due to stability issues (as Megatron-LM refuses it); use "
                                    "--cross-entropy-fusion-impl native, or omit --cross-entropy-loss-fusion")

    def config_fields(self) -> dict[str, Any]:
        """The TransformerConfig fields they set."""
        self.check()
        return {"apply_rope_fusion": self.rope, "bias_activation_fusion": self.swiglu,
                "cross_entropy_loss_fusion": self.cross_entropy, "cross_entropy_fusion_impl": self.cross_entropy_impl}


NO_FUSIONS = Fusions()


class ArchitectureError(ValueError):
    """An architecture record or flag set cannot describe a model; the message names the key or flag."""


@dataclass(kw_only=True, frozen=True)
class LlamaArgs:
    """A Llama-family model's architecture: RMSNorm, SwiGLU, no biases, RoPE."""

    num_layers: int = field(metadata=flag("--num-layers"))
    """Transformer layers (HF num_hidden_layers)."""
    hidden_size: int = field(metadata=flag("--hidden-size"))
    """Residual width d."""
    num_attention_heads: int = field(metadata=flag("--num-attention-heads"))
    """Query heads h."""
    num_query_groups: int = field(metadata=flag("--num-query-groups"))
    """KV groups g (HF num_key_value_heads; default: the heads)."""
    ffn_hidden_size: int = field(metadata=flag("--ffn-hidden-size"))
    """SwiGLU width f (HF intermediate_size)."""
    kv_channels: int = field(metadata=flag("--kv-channels"))
    """Head size k (HF head_dim; default: hidden / heads)."""
    vocab_size: int = field(metadata=flag("--vocab-size"))
    """Rows of the embedding and output tables (default: the tokenizer's, padded to
    --make-vocab-size-divisible-by x TP)."""
    max_position_embeddings: int = field(metadata=flag("--max-position-embeddings"))
    """Longest context the model is configured for (default: --seq-length)."""
    rotary_base: float = field(default=10000.0, metadata=flag("--rotary-base"))
    """RoPE theta (HF rope_theta; default 10000)."""
    rope_scaling: bool = field(default=False, metadata=flag("--use-rope-scaling"))
    """Llama 3.x RoPE frequency scaling (HF rope_type llama3)."""
    rope_scaling_factor: float = field(default=8.0, metadata=flag("--rope-scaling-factor"))
    """Llama 3.x scaling factor (HF rope factor; default 8), with --use-rope-scaling."""
    norm_epsilon: float = field(default=1e-5, metadata=flag("--norm-epsilon"))
    """RMSNorm epsilon (HF rms_norm_eps; default 1e-5)."""
    untie_embeddings_and_output_weights: bool = field(default=True, metadata=flag("--untie-embeddings-and-output-weights"))
    """A separate output layer (HF tie_word_embeddings false); without it the output layer is the
    input embedding."""
    params_dtype: str = "float32"
    """Dtype of the weights: float32 | bfloat16 | float16 (training: --bf16)."""
    hf_carry: dict[str, Any] = field(default_factory=dict)
    """HF config fields carried unchanged through a round trip (token ids, ...)."""

    @property
    def tied(self) -> bool:
        return not self.untie_embeddings_and_output_weights

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.params_dtype]

    # ---- the record (checkpoint common state) ----

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str = "model_args") -> LlamaArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(record) - names)
        if unknown:
            raise ArchitectureError(f"{where}: unknown model argument(s) {unknown}")
        try:
            return cls(**record)
        except TypeError as e:
            raise ArchitectureError(f"{where}: {e}") from e

    # ---- flags ----

    @classmethod
    def from_flags(cls, given: dict[str, Any], *, max_position_default: int, params_dtype: str = "float32") -> LlamaArgs:
        """The record from flag values (None: not given) with the flags' defaults: groups = heads,
        head size = hidden / heads, context = `max_position_default`, the output layer tied."""
        missing = [FLAGS[name] for name in REQUIRED if given.get(name) is None]
        if missing:
            raise ArchitectureError(f"{', '.join(missing)} needed: give them, or --load a checkpoint that records "
                                    "its model (converted, upscaled or trained)")
        if given.get("vocab_size") is None:
            raise ArchitectureError("--vocab-size is needed when no --tokenizer-model is given")
        heads = given["num_attention_heads"]
        derived = {
            "num_query_groups": heads, "kv_channels": given["hidden_size"] // heads,
            "max_position_embeddings": max_position_default, "untie_embeddings_and_output_weights": False,
        }
        values = {k: v for k, v in given.items() if v is not None}
        return cls(**{**derived, **values, "params_dtype": params_dtype})

    # ---- megatron-core ----

    def transformer_config(
        self, tp: int = 1, pp: int = 1, *, sequence_parallel: bool = False, initialize: bool = False,
        cpu_initialization: bool = True, init_method_std: float = 0.02, gradient_accumulation_fusion: bool = False,
        fp8: dict[str, Any] | None = None, num_layers: int | None = None, fusions: Fusions = NO_FUSIONS,
        cuda_graph_impl: str = "none",
    ) -> Any:
        """megatron-core TransformerConfig of this model at TP/PP: no dropout; `initialize=False`
        skips the random init a converter or a checkpoint load overwrites anyway; `num_layers`
        overrides the record's (LLaMA-Pro's grown model); `fp8`: model/layers/te.py fp8_config;
        `fusions`: megatron-core's kernel fusions; `cuda_graph_impl`: none | full_iteration (the
        training loop wraps its schedule; megatron-core's cross-entropy reads it too)."""
        if cuda_graph_impl not in CUDA_GRAPH_IMPLS:
            raise ArchitectureError(f"--cuda-graph-impl {cuda_graph_impl!r}: choose one of {CUDA_GRAPH_IMPLS}")
        dtype = self.torch_dtype
        return mc.TransformerConfig(
            num_layers=num_layers or self.num_layers, hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads, num_query_groups=self.num_query_groups,
            ffn_hidden_size=self.ffn_hidden_size, kv_channels=self.kv_channels,
            normalization="RMSNorm", layernorm_epsilon=self.norm_epsilon, gated_linear_unit=True,
            activation_func=F.silu, add_bias_linear=False,
            hidden_dropout=0.0, attention_dropout=0.0, init_method_std=init_method_std,
            use_cpu_initialization=cpu_initialization, perform_initialization=initialize,
            params_dtype=dtype, pipeline_dtype=dtype, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, sequence_parallel=sequence_parallel,
            gradient_accumulation_fusion=gradient_accumulation_fusion, cuda_graph_impl=cuda_graph_impl,
            **fusions.config_fields(), **(fp8 or {}),
        )

    def gpt_kwargs(self) -> dict[str, Any]:
        """GPTModel keyword arguments (besides config and spec), this pipeline stage's included."""
        return {
            "vocab_size": self.vocab_size, "max_sequence_length": self.max_position_embeddings,
            "position_embedding_type": "rope", "rotary_base": self.rotary_base,
            "rope_scaling": self.rope_scaling, "rope_scaling_factor": self.rope_scaling_factor,
            "share_embeddings_and_output_weights": self.tied,
            "pre_process": mc.parallel_state.is_pipeline_first_stage(),
            "post_process": mc.parallel_state.is_pipeline_last_stage(),
        }


# field -> flag: the only map between the record and the command line
FLAGS = flag_names(LlamaArgs)

"""A SCALE-upscaled Llama for transformers (exported by megatron-scale; imports torch and
transformers only, and is copied into the exported folder with configuration_scale_llama.py and
routing_scale_llama.py).

Every linear y = W x of the base is upscaled:

    [ y    ]   [ W    W12 ] [ x    ]      W    frozen base block
    [ y_up ] = [ W21  W22 ] [ x_up ]      W12  present only where Adapt collaborates (else 0)

- the residual stream is [x (d) ; x_up (d')]; every RMSNorm is split: the d base dims and the d'
  new dims are normalised apart, with gains `weight` and `weight_up`;
- attention: the h' new query heads and g' new KV groups come after the base heads and groups,
  so with the common ratio r = h/g = h'/g' query head j reads KV group j // r: base heads read
  base K/V, new heads new K/V (transformers' GQA over h+h' heads and g+g' groups); RoPE is the
  same for all heads;
- SwiGLU: gate and up have f' new units after the base f; down reads [f ; f'];
- output: routing_scale_llama.py (z_p, z_a, the gate, the router).
With W12 = 0 the first d dims of every layer and z_p are exactly the base Llama's.

On transformers' conventions, LlamaForCausalLM's the pattern: attention through
ALL_ATTENTION_FUNCTIONS (eager, sdpa, flex, flash where installed) with `layer_idx`; masks from
create_causal_mask (padding, packed sequences through position_ids, custom 4-D masks, static
caches); RoPE, rotation and eager attention are transformers' Llama's own; `inputs_embeds`
([b, s, d+d']), `return_dict`, `output_hidden_states` / `output_attentions` (hidden states are
[b, s, d+d'], attentions over h+h' heads) and the loss kwargs (`num_items_in_batch`) as Llama
takes them; gradient checkpointing; `resize_token_embeddings` resizes E and E_up (and W_out,
W_out_up) together, each as transformers resizes an embedding. The KV cache comes as `cache`
(transformers >= 5.24) or `past_key_values` (5.23). _supports_attention_backend is False: vLLM's
and SGLang's Transformers backends replace the embedding, the attention sizes and the head by
the base's d, h, g and one LM head, which would compute another function; they refuse this
model by that flag, and serve the fused view (modeling_scale_llama_fused.py) instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, slice_logits_to_keep
from transformers.models.llama.modeling_llama import (
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
    eager_attention_forward,
)
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_scale_llama import ScaleLlamaConfig
from .routing_scale_llama import (
    ScaleOutputLayer,
    UnitRouter,
    decode_codes,
    gate_settings,
    output_head,
    resized_codes,
    router_settings,
)

# transformers 5.24 renamed the KV cache from `past_key_values` to `cache`: generate() passes it
# to forward() as `cache=` and reads it back from the output's `cache` field (5.23: both
# `past_key_values`). forward() takes either name; outputs and create_causal_mask get the name the
# installed release declares.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
MASK_CACHE = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def _one_cache(cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    if cache is not None and past_key_values is not None:
        raise ValueError("pass the KV cache as `cache` or as `past_key_values`, not both")
    return past_key_values if cache is None else cache


@torch.compiler.disable
def _seen(cache: Cache | None) -> int:
    """Tokens the cache holds, as a number now (a static cache counts in a tensor it updates in place)."""
    return 0 if cache is None else int(cache.get_seq_length())


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class ScaleRMSNorm(nn.Module):
    """Split RMSNorm over [.., d + d']: weight [d], weight_up [d']."""

    def __init__(self, base: int, up: int, eps: float) -> None:
        super().__init__()
        self.base, self.eps = base, eps
        self.weight = nn.Parameter(torch.ones(base))
        self.weight_up = nn.Parameter(torch.ones(up))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.base
        return torch.cat((_rms(x[..., :d], self.weight, self.eps), _rms(x[..., d:], self.weight_up, self.eps)), -1)


class ScaleLinear(nn.Module):
    """[W W12; W21 W22] on [x; x_up]; returns (y, y_up). weight [m, n], weight_12 [m, n'] or
    None, weight_21 [m', n], weight_22 [m', n']."""

    def __init__(self, n: int, n_up: int, m: int, m_up: int, w12: bool) -> None:
        super().__init__()
        self.n = n
        self.weight = nn.Parameter(torch.empty(m, n))
        self.weight_12 = nn.Parameter(torch.empty(m, n_up)) if w12 else None
        self.weight_21 = nn.Parameter(torch.empty(m_up, n))
        self.weight_22 = nn.Parameter(torch.empty(m_up, n_up))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x_b, x_u = x[..., : self.n], x[..., self.n :]
        y = F.linear(x_b, self.weight)
        if self.weight_12 is not None:
            y = y + F.linear(x_u, self.weight_12)
        return y, F.linear(x_b, self.weight_21) + F.linear(x_u, self.weight_22)


class ScaleAttention(nn.Module):
    """Llama attention over h + h' query heads and g + g' KV groups ([base; new] each)."""

    def __init__(self, config: ScaleLlamaConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        d, du, k = c.hidden_size, c.scale_hidden_up, c.head_dim
        self.config, self.layer_idx, self.head_dim = config, layer_idx, k
        self.heads, self.heads_up = c.num_attention_heads, c.scale_heads_up
        self.groups, self.groups_up = c.num_key_value_heads, c.scale_groups_up
        self.num_key_value_groups = self.heads // self.groups  # = h'/g' (the config checks it)
        self.scaling = k**-0.5
        self.attention_dropout = c.attention_dropout
        self.is_causal = True
        w12 = [layer_idx, "qkv"] in c.scale_w12
        self.q_proj = ScaleLinear(d, du, self.heads * k, self.heads_up * k, w12)
        self.k_proj = ScaleLinear(d, du, self.groups * k, self.groups_up * k, w12)
        self.v_proj = ScaleLinear(d, du, self.groups * k, self.groups_up * k, w12)
        self.o_proj = ScaleLinear(self.heads * k, self.heads_up * k, d, du, [layer_idx, "proj"] in c.scale_w12)

    def _heads(self, parts: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        shape = parts[0].shape[:-1]
        both = torch.cat((parts[0].view(*shape, -1, self.head_dim), parts[1].view(*shape, -1, self.head_dim)), -2)
        return both.transpose(1, 2)  # [b, heads, s, k]

    def forward(self, hidden_states: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor],
                attention_mask: torch.Tensor | None = None, cache: Cache | None = None,
                **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        shape = hidden_states.shape[:-1]
        query, key = self._heads(self.q_proj(hidden_states)), self._heads(self.k_proj(hidden_states))
        value = self._heads(self.v_proj(hidden_states))
        cos, sin = position_embeddings
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        attend: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                 eager_attention_forward)
        out, weights = attend(self, query, key, value, attention_mask,
                              dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
                              **kwargs)
        y, y_up = self.o_proj(out.reshape(*shape, -1))  # [b, s, (h + h') k]: base heads, then new
        return torch.cat((y, y_up), dim=-1), weights


class ScaleMLP(nn.Module):
    def __init__(self, config: ScaleLlamaConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        d, du, f, fu = c.hidden_size, c.scale_hidden_up, c.intermediate_size, c.scale_ffn_up
        fc1_w12 = [layer_idx, "fc1"] in c.scale_w12
        self.gate_proj = ScaleLinear(d, du, f, fu, fc1_w12)
        self.up_proj = ScaleLinear(d, du, f, fu, fc1_w12)
        self.down_proj = ScaleLinear(f, fu, d, du, [layer_idx, "fc2"] in c.scale_w12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.silu(torch.cat(self.gate_proj(x), dim=-1)) * torch.cat(self.up_proj(x), dim=-1)
        return torch.cat(self.down_proj(hidden), dim=-1)


class ScaleDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: ScaleLlamaConfig, layer_idx: int) -> None:
        super().__init__()
        d, du, eps = config.hidden_size, config.scale_hidden_up, config.rms_norm_eps
        self.input_layernorm = ScaleRMSNorm(d, du, eps)
        self.self_attn = ScaleAttention(config, layer_idx)
        self.post_attention_layernorm = ScaleRMSNorm(d, du, eps)
        self.mlp = ScaleMLP(config, layer_idx)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, cache: Cache | None = None,
                use_cache: bool | None = False, **kwargs: Any) -> torch.Tensor:
        attended, _ = self.self_attn(self.input_layernorm(hidden_states), position_embeddings=position_embeddings,
                                     attention_mask=attention_mask, cache=cache, **kwargs)
        hidden_states = hidden_states + attended
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class ScaleEmbedding(nn.Module):
    """[E | E_up] lookup: weight [V, d], weight_up [V, d']; the padding row gets no gradient (Llama's
    nn.Embedding(padding_idx))."""

    def __init__(self, vocab: int, d: int, du: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.empty(vocab, d))
        self.weight_up = nn.Parameter(torch.empty(vocab, du))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = self.padding_idx if self.padding_idx is not None and self.padding_idx < self.weight.shape[0] else None
        return torch.cat((F.embedding(ids, self.weight, pad), F.embedding(ids, self.weight_up, pad)), dim=-1)


class ScaleLlamaPreTrainedModel(PreTrainedModel):
    config_class = ScaleLlamaConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["ScaleDecoderLayer"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True
    _supports_attention_backend = False  # see the module docstring: serve the fused view
    _can_record_outputs: ClassVar[dict] = {"hidden_states": ScaleDecoderLayer, "attentions": ScaleAttention}

    def _init_weights(self, module: nn.Module) -> None:
        """The blocks SCALE starts at zero (W12, E_up, W_out_up) at zero, the norms' gains at one, the
        other weights N(0, initializer_range); anything else as transformers initialises it."""
        std = self.config.initializer_range
        if isinstance(module, ScaleRMSNorm):
            init.ones_(module.weight)
            init.ones_(module.weight_up)
        elif isinstance(module, ScaleLinear):
            for p in (module.weight, module.weight_21, module.weight_22):
                init.normal_(p, mean=0.0, std=std)
            if module.weight_12 is not None:
                init.zeros_(module.weight_12)
        elif isinstance(module, (ScaleEmbedding, ScaleOutputLayer)):
            if module.weight is not None:
                init.normal_(module.weight, mean=0.0, std=std)
            init.zeros_(module.weight_up)
        else:
            super()._init_weights(module)


class ScaleLlamaModel(ScaleLlamaPreTrainedModel):
    """The decoder stack: [b, s] ids (or [b, s, d+d'] embeddings) -> [b, s, d+d'] hidden states."""

    def __init__(self, config: ScaleLlamaConfig) -> None:
        super().__init__(config)
        d, du = config.hidden_size, config.scale_hidden_up
        self.padding_idx, self.vocab_size = config.pad_token_id, config.vocab_size
        self.embed_tokens = ScaleEmbedding(config.vocab_size, d, du, self.padding_idx)
        self.layers = nn.ModuleList(ScaleDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = ScaleRMSNorm(d, du, config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.gradient_checkpointing = False
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None, cache: Cache | None = None,
                inputs_embeds: torch.Tensor | None = None, use_cache: bool | None = None,
                past_key_values: Cache | None = None, **kwargs: Any) -> BaseModelOutputWithPast:
        cache = _one_cache(cache, past_key_values)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        width = self.config.hidden_size + self.config.scale_hidden_up
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        elif inputs_embeds.shape[-1] != width:
            raise ValueError(f"inputs_embeds of width {inputs_embeds.shape[-1]}: this model's embeddings are "
                             f"[E | E_up], d + d' = {width} wide (model.get_input_embeddings()(input_ids))")
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        if position_ids is None:
            past = cache.get_seq_length() if cache is not None else 0
            position_ids = (torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past).unsqueeze(0)
        mask = create_causal_mask(config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                  position_ids=position_ids, **{MASK_CACHE: cache})
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)
        for layer in self.layers[: self.config.num_hidden_layers]:
            hidden_states = layer(hidden_states, attention_mask=mask, position_embeddings=position_embeddings,
                                  position_ids=position_ids, cache=cache, use_cache=use_cache, **kwargs)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden_states), **{CACHE_FIELD: cache})


class ScaleLlamaForCausalLM(ScaleLlamaPreTrainedModel, GenerationMixin):
    def __init__(self, config: ScaleLlamaConfig) -> None:
        super().__init__(config)
        self.model = ScaleLlamaModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = ScaleOutputLayer(config.vocab_size, config.hidden_size, config.scale_hidden_up,
                                        config.scale_tied_output)
        self.last_route_keep: torch.Tensor | None = None
        self._unit_carry: dict | None = None  # the open routing unit after the last call (UnitRouter)
        self._unit_codes: tuple[str, torch.Tensor] | None = None
        self.post_init()

    @torch.compiler.disable  # Python state across calls: runs eagerly (a graph break under torch.compile)
    def _unit_router(self, unit: str, ids: torch.Tensor | None, cache: Cache | None, past: int) -> UnitRouter:
        """The per-unit pooling of this call's routing decisions."""
        text = getattr(self.config, "scale_router_unit_codes", None)
        if not text:
            raise ValueError(f"scale_router_unit {unit!r} needs scale_router_unit_codes (export with the byte-level "
                             "tokenizer: convert_megatron_to_hf --tokenizer)")
        if ids is None:
            raise ValueError(f"scale_router_unit {unit!r} routes by the tokens' bytes: pass input_ids, not "
                             "inputs_embeds (or route_unit='token')")
        if self._unit_codes is None or self._unit_codes[0] is not text:
            self._unit_codes = (text, decode_codes(text, self.config.vocab_size))
        carry = None
        if past:
            carry = self._unit_carry
            if carry is None or carry["cache"] is not cache or carry["length"] != past or carry["last_id"].shape[0] != ids.shape[0]:
                raise ValueError(f"scale_router_unit {unit!r}: this call continues a KV cache that no call routed per "
                                 f"{unit} before it (the open unit is unknown); pass the whole sequence, or generate()")
        return UnitRouter(self._unit_codes[1], unit, ids, carry)

    @can_return_tuple
    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None, cache: Cache | None = None,
                inputs_embeds: torch.Tensor | None = None, labels: torch.LongTensor | None = None,
                use_cache: bool | None = None, logits_to_keep: int | torch.Tensor = 0,
                route_tau: float | None = None, route_statistic: str | None = None,
                route_direction: str | None = None, route_unit: str | None = None,
                past_key_values: Cache | None = None, **kwargs: Any) -> CausalLMOutputWithPast:
        """route_tau / route_statistic / route_direction / route_unit override
        config.scale_router_tau / _statistic / _direction / _unit for this call (generate() passes
        them on: model.generate(ids, route_tau=0.9, route_direction="below")). The KV cache comes
        as `cache` (transformers >= 5.24) or `past_key_values` (earlier): one of them, not both.
        `labels` and the loss kwargs (num_items_in_batch, ...) go to transformers' causal-LM loss."""
        cache = _one_cache(cache, past_key_values)
        head = output_head(self.config)
        router = router_settings(self.config, route_tau, route_statistic, route_direction, route_unit)
        gate = gate_settings(self.config)
        pool, past = None, 0
        if head == "route" and router.unit != "token":
            past = _seen(cache)
            pool = self._unit_router(router.unit, input_ids, cache, past)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                         inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
        x = out.last_hidden_state
        if pool is None:
            x = slice_logits_to_keep(x, logits_to_keep)
        base_w = self.model.embed_tokens.weight if self.lm_head.weight is None else self.lm_head.weight
        logits, keep = self.lm_head(x, base_w, head, router, gate, pool)
        new_cache = getattr(out, CACHE_FIELD)
        self._unit_carry = None
        if pool is not None:
            if new_cache is not None:
                self._unit_carry = {**pool.state, "cache": new_cache, "length": past + x.shape[1]}
            # the router needed every position; the caller wants the last ones
            logits = slice_logits_to_keep(logits, logits_to_keep)
            keep = slice_logits_to_keep(keep.unsqueeze(-1), logits_to_keep).squeeze(-1)
        self.last_route_keep = keep
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                      attentions=out.attentions, **{CACHE_FIELD: new_cache})

    def _resize_token_embeddings(self, new_num_tokens: int | None, pad_to_multiple_of: int | None = None,
                                 mean_resizing: bool = True) -> nn.Module:
        """E and E_up as transformers resizes an nn.Embedding, then W_out (untied) and W_out_up as it
        resizes an lm_head, each block on its own (their mean and covariance are their own); a
        Route model's token codes get one EMPTY code per new token (routing_scale_llama.resized_codes)."""
        emb = self.model.embed_tokens
        for name in ("weight", "weight_up"):
            block = nn.Embedding(*getattr(emb, name).shape, device="meta")
            block.weight = getattr(emb, name)  # resized in place (transformers swaps its .data)
            self._get_resized_embeddings(block, new_num_tokens, pad_to_multiple_of, mean_resizing)
        vocab = emb.weight.shape[0]
        for name in ("weight", "weight_up"):
            old = getattr(self.lm_head, name)
            if old is None:
                continue
            head = nn.Linear(old.shape[1], old.shape[0], bias=False, device="meta")
            head.weight = old
            new = self._get_resized_lm_head(head, vocab, mean_resizing=mean_resizing).weight
            new.requires_grad_(old.requires_grad)
            setattr(self.lm_head, name, new)
        if getattr(self.config, "scale_router_unit_codes", None):
            self.config.scale_router_unit_codes = resized_codes(self.config.scale_router_unit_codes, vocab)
        return emb

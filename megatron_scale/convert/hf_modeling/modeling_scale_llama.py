"""A SCALE-upscaled Llama for transformers (exported by megatron-scale; imports torch and
transformers only, and is copied into the exported folder).

Every linear y = W x of the base is upscaled:

    [ y    ]   [ W    W12 ] [ x    ]      W    frozen base block
    [ y_up ] = [ W21  W22 ] [ x_up ]      W12  present only where Adapt collaborates (else 0)

- the residual stream is [x (d) ; x_up (d')]; every RMSNorm is split: the d base dims and the d'
  new dims are normalised apart, with gains `weight` and `weight_up`;
- attention: the h' new query heads and g' new KV groups come after the base heads and groups,
  so with the common ratio r = h/g = h'/g' query head j reads KV group j // r: base heads read
  base K/V, new heads new K/V; RoPE is the same for all heads;
- SwiGLU: gate and up have f' new units after the base f; down reads [f ; f'];
- output: z_p = W_out x (preservation head), z_a = z_p + W_out_up x_up (adaptation head), or with
  config.scale_gate_statistic set z_a = z_p + g W_out_up x_up, g = sigmoid((tau - s(z_p)) / T) per
  token from a statistic of z_p alone (megatron_scale/model/layers/gate.py);
  the router emits z_p per token where cos(z_p, z_a) >= tau, else z_a (or another statistic:
  config.scale_router_statistic; with config.scale_router_direction "below", where the statistic
  <= tau; tau, statistic and direction can be overridden per call); with config.scale_router_unit
  char / word, all tokens of one UTF-8 character / whitespace-delimited word take the decision of
  the unit's first token (see `UnitRouter`).
With W12 = 0 the first d dims of every layer and z_p are exactly the base Llama's.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_scale_llama import ScaleLlamaConfig

# transformers 5.24 renamed the KV cache from `past_key_values` to `cache`: generate() passes it
# to forward() as `cache=` and reads it back from the output's `cache` field (5.23: both
# `past_key_values`). forward() takes either name; the output uses the field the installed
# CausalLMOutputWithPast declares (5.24 still accepts the old name there, with a deprecation).
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

HEADS = ("auto", "adapt", "preserve", "route")
STATISTICS = ("cosine", "centered-cosine", "max-prob", "certainty")
DIRECTIONS = ("above", "below")
UNITS = ("token", "char", "word")
# per-token codes (megatron_scale/model/layers/route_units.py writes them; the rules below are its own)
EMPTY, CONT, SPACE_START, SPACE_END, ALL_CONT, OWED_SHIFT = 1, 2, 4, 8, 16, 5


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


def rope_inv_freq(config: ScaleLlamaConfig, device: torch.device | None = None) -> torch.Tensor:
    """RoPE inverse frequencies: theta^(-2i/k), with Llama 3.x scaling when configured."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    theta = float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    k = config.head_dim
    inv = 1.0 / (theta ** (torch.arange(0, k, 2, dtype=torch.int64, device=device).float() / k))
    if params.get("rope_type", params.get("type", "default")) != "llama3":
        return inv
    factor, low, high = float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"])
    context = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    # long waves (beyond the original context / low) slow down by `factor`; short waves (below
    # context / high) stay; in between, a linear blend in context / wavelength
    blend = (context / wavelen - low) / (high - low)
    mid = (1 - blend) * inv / factor + blend * inv
    out = torch.where(wavelen > context / low, inv / factor, inv)
    return torch.where((wavelen >= context / high) & (wavelen <= context / low), mid, out)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class ScaleAttention(nn.Module):
    def __init__(self, config: ScaleLlamaConfig, layer: int) -> None:
        super().__init__()
        c = config
        d, du, k = c.hidden_size, c.scale_hidden_up, c.head_dim
        self.layer = layer
        self.heads, self.heads_up = c.num_attention_heads, c.scale_heads_up
        self.groups, self.groups_up = c.num_key_value_heads, c.scale_groups_up
        self.k = k
        w12 = [layer, "qkv"] in c.scale_w12
        self.q_proj = ScaleLinear(d, du, self.heads * k, self.heads_up * k, w12)
        self.k_proj = ScaleLinear(d, du, self.groups * k, self.groups_up * k, w12)
        self.v_proj = ScaleLinear(d, du, self.groups * k, self.groups_up * k, w12)
        self.o_proj = ScaleLinear(self.heads * k, self.heads_up * k, d, du, [layer, "proj"] in c.scale_w12)

    def _heads(self, parts: tuple[torch.Tensor, torch.Tensor], count: int, count_up: int) -> torch.Tensor:
        b, s = parts[0].shape[:2]
        both = torch.cat((parts[0].view(b, s, count, self.k), parts[1].view(b, s, count_up, self.k)), dim=2)
        return both.transpose(1, 2)  # [b, heads, s, k]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                cache: Cache | None) -> torch.Tensor:
        b, s, _ = x.shape
        q = _rotate(self._heads(self.q_proj(x), self.heads, self.heads_up), cos, sin)
        key = _rotate(self._heads(self.k_proj(x), self.groups, self.groups_up), cos, sin)
        value = self._heads(self.v_proj(x), self.groups, self.groups_up)
        if cache is not None:
            key, value = cache.update(key, value, self.layer)
        ratio = self.heads // self.groups
        key, value = key.repeat_interleave(ratio, dim=1), value.repeat_interleave(ratio, dim=1)
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask)
        y, y_up = self.o_proj(out.transpose(1, 2).reshape(b, s, -1))
        return torch.cat((y, y_up), dim=-1)


class ScaleMLP(nn.Module):
    def __init__(self, config: ScaleLlamaConfig, layer: int) -> None:
        super().__init__()
        c = config
        d, du, f, fu = c.hidden_size, c.scale_hidden_up, c.intermediate_size, c.scale_ffn_up
        fc1_w12 = [layer, "fc1"] in c.scale_w12
        self.gate_proj = ScaleLinear(d, du, f, fu, fc1_w12)
        self.up_proj = ScaleLinear(d, du, f, fu, fc1_w12)
        self.down_proj = ScaleLinear(f, fu, d, du, [layer, "fc2"] in c.scale_w12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.silu(torch.cat(self.gate_proj(x), dim=-1)) * torch.cat(self.up_proj(x), dim=-1)
        return torch.cat(self.down_proj(hidden), dim=-1)


class ScaleDecoderLayer(nn.Module):
    def __init__(self, config: ScaleLlamaConfig, layer: int) -> None:
        super().__init__()
        d, du, eps = config.hidden_size, config.scale_hidden_up, config.rms_norm_eps
        self.input_layernorm = ScaleRMSNorm(d, du, eps)
        self.self_attn = ScaleAttention(config, layer)
        self.post_attention_layernorm = ScaleRMSNorm(d, du, eps)
        self.mlp = ScaleMLP(config, layer)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                cache: Cache | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class ScaleEmbedding(nn.Module):
    """[E | E_up] lookup: weight [V, d], weight_up [V, d']."""

    def __init__(self, vocab: int, d: int, du: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d))
        self.weight_up = nn.Parameter(torch.empty(vocab, du))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.cat((F.embedding(ids, self.weight), F.embedding(ids, self.weight_up)), dim=-1)


class ScaleOutputLayer(nn.Module):
    """z_p = W_out x, z_a = z_p + W_out_up x_up; weight [V, d] (absent when tied to E),
    weight_up [V, d']."""

    def __init__(self, vocab: int, d: int, du: int, tied: bool) -> None:
        super().__init__()
        self.d = d
        self.weight = None if tied else nn.Parameter(torch.empty(vocab, d))
        self.weight_up = nn.Parameter(torch.empty(vocab, du))

    def forward(self, x: torch.Tensor, base_weight: torch.Tensor, head: str, tau: float,
                statistic: str, direction: str = "above",
                pool: Callable[[torch.Tensor], torch.Tensor] | None = None,
                gate: tuple[str, float, float, str] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        z_p = F.linear(x[..., : self.d], base_weight)
        if head == "preserve":
            return z_p, None
        z_up = F.linear(x[..., self.d :], self.weight_up)
        if gate is not None:  # (statistic, tau, temperature, direction): g = sigmoid((tau - s(z_p)) / T)
            g_stat, g_tau, g_temp, g_dir = gate
            if g_dir not in DIRECTIONS:
                raise ValueError(f"scale_gate_direction {g_dir!r}: choose one of {DIRECTIONS}")
            s = router_statistic(g_stat, z_p, z_p)
            z_up = z_up * torch.sigmoid((g_tau - s if g_dir == "above" else s - g_tau) / g_temp).to(z_p.dtype).unsqueeze(-1)
        z_a = z_p + z_up
        if head == "adapt":
            return z_a, None
        stat = router_statistic(statistic, z_p, z_a)
        if direction not in DIRECTIONS:
            raise ValueError(f"scale_router_direction {direction!r}: choose one of {DIRECTIONS}")
        keep = stat >= tau if direction == "above" else stat <= tau
        if pool is not None:
            keep = pool(keep)
        return torch.where(keep.unsqueeze(-1), z_p, z_a), keep


def _cosine(p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    dot, pp, aa = (p * a).sum(-1), (p * p).sum(-1), (a * a).sum(-1)
    denom = torch.sqrt(pp * aa)
    cos = torch.where(denom > 0, dot / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.ones_like(dot))
    return cos.clamp(-1.0, 1.0)  # an all-zero head keeps z_p


def router_statistic(name: str, z_p: torch.Tensor, z_a: torch.Tensor) -> torch.Tensor:
    """Per token (fp32): keep z_p where it is >= tau. cosine: cos(z_p, z_a); centered-cosine: the
    same on mean-centred logits; max-prob: max softmax(z_p); certainty: 1 - H(softmax(z_p)) / log V."""
    p, a = z_p.float(), z_a.float()
    if name == "cosine":
        return _cosine(p, a)
    if name == "centered-cosine":
        return _cosine(p - p.mean(-1, keepdim=True), a - a.mean(-1, keepdim=True))
    if name in ("max-prob", "certainty"):
        shifted = p - p.max(-1, keepdim=True).values
        e = shifted.exp()
        s = e.sum(-1)
        if name == "max-prob":
            return 1.0 / s
        entropy = s.log() - (e * shifted).sum(-1) / s
        vocab = p.shape[-1]
        return (1.0 - entropy / math.log(vocab)).clamp(0.0, 1.0) if vocab > 1 else torch.ones_like(s)
    raise ValueError(f"scale_router_statistic {name!r}: choose one of {STATISTICS}")


def _codes_of(codes: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    inside = (ids >= 0) & (ids < codes.numel())
    c = codes.to(ids.device)[ids.clamp(0, codes.numel() - 1)].long()
    return torch.where(inside, c, torch.full_like(c, EMPTY))


def _joins(codes: torch.Tensor, prev: torch.Tensor, cur: torch.Tensor, unit: str) -> torch.Tensor:
    """Whether predicted token `cur` joins the unit of `prev`, predicted just before it."""
    p, c = _codes_of(codes, prev), _codes_of(codes, cur)
    join = (c & CONT) != 0
    if unit == "word":
        join = join | ((c & SPACE_START) == 0) | ((p & SPACE_END) != 0)
    return (((p | c) & EMPTY) == 0) & join


def _owed_after(codes: torch.Tensor, ids: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """[b] UTF-8 continuation bytes still owed after the last token of each row (> 0: the text
    ends inside a character); `before`: owed before the first."""
    c = _codes_of(codes, ids)
    owed, all_cont = (c >> OWED_SHIFT) & 3, (c & ALL_CONT) != 0
    pos = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)
    last = torch.where(all_cont, torch.full_like(pos, -1), pos).max(-1).values
    spent = torch.where(all_cont & (pos > last.unsqueeze(-1)), owed, torch.zeros_like(owed)).sum(-1)
    base = torch.where(last < 0, before.to(owed), owed.gather(-1, last.clamp_min(0).unsqueeze(-1)).squeeze(-1))
    return (base - spent).clamp_min(0)


class UnitRouter:
    """One routing decision per UTF-8 character or word: each predicted token takes the decision of
    its unit's first token (causal: fixed when the unit starts). The unit of a predicted token is
    known from its bytes and the previous one's (the codes), except at the last position of the
    input, whose token is not there yet: it continues the open unit when the text so far ends
    inside a character (char, word) or, for word, always unless the last token is special; else it
    starts one. On a whole sequence this is exactly the Megatron model's routing at every position
    but the last (whose label the Megatron evaluation knows). Across calls that continue a KV cache
    (generate()), the state of the open unit is carried; the token the last call could not see is
    then known, and the open unit is what the known tokens make it."""

    def __init__(self, codes: torch.Tensor, unit: str, ids: torch.Tensor, carry: dict | None) -> None:
        self.codes, self.unit, self.ids, self.carry = codes, unit, ids, carry
        self.state: dict | None = None

    def __call__(self, keep: torch.Tensor) -> torch.Tensor:
        ids, codes, carry = self.ids, self.codes, self.carry
        b, n = ids.shape
        starts = torch.ones(b, n, dtype=torch.bool, device=ids.device)
        if n > 1:
            starts[:, :-1] = ~_joins(codes, ids[:, :-1], ids[:, 1:], self.unit)  # labels known: ids[j + 1]
        before = torch.zeros(b, dtype=torch.long, device=ids.device) if carry is None else carry["owed"]
        owed = _owed_after(codes, ids, before)
        if carry is not None or n > 1:  # the last position's label is not there yet
            last_empty = (_codes_of(codes, ids[:, -1]) & EMPTY) != 0
            starts[:, -1] = last_empty | ((owed == 0) if self.unit == "char" else torch.zeros_like(last_empty))
        open_keep = None
        if carry is not None:  # the previous call's last position: its label is ids[:, 0] now
            began = ~_joins(codes, carry["last_id"], ids[:, 0], self.unit) | carry["open_keep"].isnan()
            open_keep = torch.where(began, carry["own_keep"], carry["open_keep"].nan_to_num(0.0).bool())
        pos = torch.arange(n, device=ids.device).expand(b, n)
        first = torch.where(starts, pos, torch.full_like(pos, -1)).cummax(-1).values
        pooled = keep.gather(-1, first.clamp_min(0))
        if open_keep is not None:
            pooled = torch.where(first < 0, open_keep.unsqueeze(-1), pooled)
        # the unit decision at the second-to-last position is exact (its label was known)
        if n > 1:
            before_last = pooled[:, -2].float()
        elif open_keep is not None:
            before_last = open_keep.float()
        else:
            before_last = torch.full((b,), float("nan"), device=ids.device)
        self.state = {"last_id": ids[:, -1], "own_keep": keep[:, -1], "open_keep": before_last, "owed": owed}
        return pooled


def _decode_codes(text: str, vocab: int) -> torch.Tensor:
    try:
        codes = torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)
    except ValueError as e:
        raise ValueError(f"scale_router_unit_codes: not base64 ({e})") from e
    if codes.numel() != vocab:
        raise ValueError(f"scale_router_unit_codes: {codes.numel()} codes for a vocabulary of {vocab}")
    return codes


class ScaleLlamaPreTrainedModel(PreTrainedModel):
    config_class = ScaleLlamaConfig
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["ScaleDecoderLayer"]
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        std = getattr(self.config, "initializer_range", 0.02)
        for name, p in module.named_parameters(recurse=False):
            with torch.no_grad():
                if isinstance(module, ScaleRMSNorm):
                    p.fill_(1.0)
                elif name == "weight_12" or (name == "weight_up" and not isinstance(module, ScaleRMSNorm)):
                    p.zero_()  # the blocks that start at zero in SCALE
                else:
                    p.normal_(0.0, std)


class ScaleLlamaModel(ScaleLlamaPreTrainedModel):
    def __init__(self, config: ScaleLlamaConfig) -> None:
        super().__init__(config)
        d, du = config.hidden_size, config.scale_hidden_up
        self.embed_tokens = ScaleEmbedding(config.vocab_size, d, du)
        self.layers = nn.ModuleList(ScaleDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = ScaleRMSNorm(d, du, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                position_ids: torch.Tensor | None, cache: Cache | None) -> torch.Tensor:
        b, s = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + s, device=input_ids.device).unsqueeze(0).expand(b, s)
        freqs = position_ids[..., None].float() * rope_inv_freq(self.config, input_ids.device)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [b, 1, s, k]
        x = self.embed_tokens(input_ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        total = past + s
        mask = torch.arange(total, device=x.device)[None, :] <= torch.arange(past, total, device=x.device)[:, None]
        mask = mask[None, None].expand(b, 1, s, total)
        if attention_mask is not None:
            mask = mask & attention_mask[:, None, None, -total:].bool()
            mask = mask | ~mask.any(-1, keepdim=True)  # rows of padding only: attend anywhere, ignored
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        return self.norm(x)


class ScaleLlamaForCausalLM(ScaleLlamaPreTrainedModel, GenerationMixin):
    def __init__(self, config: ScaleLlamaConfig) -> None:
        super().__init__(config)
        self.model = ScaleLlamaModel(config)
        self.lm_head = ScaleOutputLayer(config.vocab_size, config.hidden_size, config.scale_hidden_up,
                                        config.scale_tied_output)
        self.last_route_keep: torch.Tensor | None = None
        self._unit_carry: dict | None = None  # the open routing unit after the last call (UnitRouter)
        self._unit_codes: tuple[str, torch.Tensor] | None = None
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def output_head(self) -> str:
        head = self.config.scale_output_head
        if head not in HEADS:
            raise ValueError(f"scale_output_head {head!r}: choose one of {HEADS}")
        if head == "auto":
            return "route" if self.config.scale_variant == "route" else "adapt"
        return head

    def _unit_router(self, unit: str, ids: torch.Tensor, cache: Cache | None, past: int) -> UnitRouter | None:
        """The per-unit pooling of this call's routing decisions (None: per token)."""
        if unit not in UNITS:
            raise ValueError(f"scale_router_unit {unit!r}: choose one of {UNITS}")
        if unit == "token":
            self._unit_carry = None
            return None
        text = getattr(self.config, "scale_router_unit_codes", None)
        if not text:
            raise ValueError(f"scale_router_unit {unit!r} needs scale_router_unit_codes (export with the byte-level "
                             "tokenizer: convert_megatron_to_hf --tokenizer)")
        if self._unit_codes is None or self._unit_codes[0] is not text:
            self._unit_codes = (text, _decode_codes(text, self.config.vocab_size))
        carry = None
        if past:
            carry = self._unit_carry
            if carry is None or carry["cache"] is not cache or carry["length"] != past or carry["last_id"].shape[0] != ids.shape[0]:
                raise ValueError(f"scale_router_unit {unit!r}: this call continues a KV cache that no call routed per "
                                 f"{unit} before it (the open unit is unknown); pass the whole sequence, or generate()")
        return UnitRouter(self._unit_codes[1], unit, ids, carry)

    def _gate(self) -> tuple[str, float, float, str] | None:
        """config.scale_gate_*: the gate of W_out_up's term (None: no gate, the paper's z_a)."""
        c = self.config
        stat = getattr(c, "scale_gate_statistic", "none")
        if stat == "none":
            return None
        if stat not in ("max-prob", "certainty"):
            raise ValueError(f"scale_gate_statistic {stat!r}: choose one of none, max-prob, certainty")
        return stat, float(c.scale_gate_tau), float(c.scale_gate_temperature), getattr(c, "scale_gate_direction", "above")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: Cache | None = None,
                use_cache: bool | None = None, labels: torch.Tensor | None = None,
                logits_to_keep: int = 0, route_tau: float | None = None, route_statistic: str | None = None,
                route_direction: str | None = None, route_unit: str | None = None,
                past_key_values: Cache | None = None, **kwargs: object) -> CausalLMOutputWithPast:
        """route_tau / route_statistic / route_direction / route_unit override
        config.scale_router_tau / _statistic / _direction / _unit for this call (generate() passes
        them on: model.generate(ids, route_tau=0.9, route_direction="below")). The KV cache comes
        as `cache` (transformers >= 5.24) or `past_key_values` (earlier): one of them, not both."""
        if cache is not None and past_key_values is not None:
            raise ValueError("pass the KV cache as `cache` or as `past_key_values`, not both")
        cache = past_key_values if cache is None else cache
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length() if use_cache and cache is not None else 0
        head = self.output_head()
        unit = getattr(self.config, "scale_router_unit", "token") if route_unit is None else route_unit
        router = self._unit_router(unit, input_ids, cache if use_cache else None, past) if head == "route" else None
        x = self.model(input_ids, attention_mask, position_ids, cache if use_cache else None)
        if logits_to_keep and router is None:
            x = x[:, -logits_to_keep:]
        base_w = self.model.embed_tokens.weight if self.lm_head.weight is None else self.lm_head.weight
        tau = self.config.scale_router_tau if route_tau is None else float(route_tau)
        statistic = self.config.scale_router_statistic if route_statistic is None else route_statistic
        direction = getattr(self.config, "scale_router_direction", "above") if route_direction is None else route_direction
        logits, self.last_route_keep = self.lm_head(x, base_w, head, tau, statistic, direction, router, self._gate())
        if router is not None:
            self._unit_carry = {**router.state, "cache": cache, "length": past + input_ids.shape[1]} if use_cache else None
            if logits_to_keep:  # the router needed every position; the caller wants the last ones
                logits, self.last_route_keep = logits[:, -logits_to_keep:], self.last_route_keep[:, -logits_to_keep:]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: cache if use_cache else None})

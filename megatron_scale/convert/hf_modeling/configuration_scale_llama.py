"""Configurations of a SCALE-upscaled Llama exported by megatron-scale: the SCALE model
(`ScaleLlamaConfig`) and its fused view (`ScaleFusedLlamaConfig`).

ScaleLlamaConfig: the standard Llama fields describe the base model (hidden_size d,
num_attention_heads h, num_key_value_heads g, intermediate_size f, head_dim k); the `scale_*`
fields the expansion:

    scale_hidden_up      d'   extra residual dims (split RMSNorm: base and new dims apart)
    scale_heads_up       h'   extra query heads, appended after the base heads
    scale_groups_up      g'   extra KV groups, appended after the base groups (h'/g' = h/g)
    scale_ffn_up         f'   extra SwiGLU units (gate and up), appended after the base units
    scale_variant        preserve | adapt | route
    scale_w12            [[layer, module], ...] where W12 exists (module: qkv, proj, fc1, fc2)
    scale_router_tau     route: emit the preservation head where the router statistic >= tau
                         (editable; forward() and generate() also take route_tau=...)
    scale_router_statistic  cosine (the paper's) | centered-cosine | max-prob | certainty
                         (editable; forward() and generate() also take route_statistic=...)
    scale_router_direction  above (keep z_p where statistic >= tau, the paper's; the default, so a
                         folder without the key reads as above) | below (keep z_p where <= tau)
                         (editable; forward() and generate() also take route_direction=...)
    scale_router_unit    token (the default, so a folder without the key routes per token) | char |
                         word: all tokens of one UTF-8 character or whitespace-delimited word take the
                         decision of the unit's first token (editable; forward() and generate() also
                         take route_unit=...); char and word need scale_router_unit_codes
    scale_router_unit_codes  base64 of one byte per token id: what the unit rules need of its bytes
                         (written by the export when given the byte-level tokenizer)
    scale_output_rows    all | hangul: which rows of W_out_up trained (a record of how the model was
                         trained that forward() does not read: the weights hold the rows as trained,
                         those outside the script as they were, zero from the upscaling)
    scale_gate_statistic none (the paper's z_a) | max-prob | certainty: z_a = z_p + g W_out_up h_up
                         with g = sigmoid((scale_gate_tau - s(z_p)) / scale_gate_temperature) per token
                         (scale_gate_direction below: sigmoid((s - tau) / T)), s a statistic of z_p alone
    scale_output_head    auto (route for a route model, else adapt) | adapt | preserve | route
    scale_tied_output    the preservation head W_out is the input embedding E

ScaleFusedLlamaConfig (the fused view, modeling_scale_llama_fused.py) is a Llama of the whole
width: hidden_size d+d', num_attention_heads h+h', num_key_value_heads g+g', intermediate_size
f+f', head_dim k, and one field of its own, `scale_norm_split` d: every RMSNorm normalises the
first d dims and the other d' apart. `scale_variant` and `scale_output_rows` are records only.

A `scale_*` key neither class knows, a value the model would not know (a head, a statistic, a
direction, a unit, a gate) and a RoPE type transformers does not implement are refused when the
config is made, naming the key, instead of being ignored.

Only torch and transformers are imported (and the folder's own routing_scale_llama.py): these
files are copied into the exported folder.

config.json says model_type "llama" so that `AutoTokenizer.from_pretrained(folder)`, which
reads the model's config first, finds a config class without running this file (an unknown
model_type there makes transformers ask whether to run the folder's code). A SCALE folder must
not load as a plain LlamaForCausalLM, though (it would ignore the expansion, or normalise the
fused view's d+d' dims together, and compute another function), so config.json's hidden_act is
GUARD: transformers' Llama fails on it naming trust_remote_code, and these classes read it as the
SiLU it is.
"""

from typing import Any

from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .routing_scale_llama import check_settings

GUARD = "silu (a SCALE model: load it with trust_remote_code=True)"
MODULES = ("qkv", "proj", "fc1", "fc2")
VARIANTS = ("preserve", "adapt", "route")


def _unguard(kwargs: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(k for k in kwargs if k.startswith("scale_") and k not in known)
    if unknown:
        raise ValueError(f"config: unknown key(s) {unknown}: this model reads only {sorted(known)}")
    if kwargs.get("hidden_act") == GUARD:
        kwargs["hidden_act"] = "silu"


def _check_rope(config: LlamaConfig) -> None:
    kind = (config.rope_parameters or {}).get("rope_type", "default")
    if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"rope_parameters.rope_type {kind!r}: transformers implements default, "
                         f"{', '.join(ROPE_INIT_FUNCTIONS)}")


class ScaleLlamaConfig(LlamaConfig):
    model_type = "llama"

    def __init__(
        self,
        scale_hidden_up: int = 0,
        scale_heads_up: int = 0,
        scale_groups_up: int = 0,
        scale_ffn_up: int = 0,
        scale_variant: str = "preserve",
        scale_w12: list | None = None,
        scale_router_tau: float = 0.5,
        scale_router_statistic: str = "cosine",
        scale_router_direction: str = "above",
        scale_router_unit: str = "token",
        scale_router_unit_codes: str | None = None,
        scale_output_head: str = "auto",
        scale_output_rows: str = "all",
        scale_gate_statistic: str = "none",
        scale_gate_tau: float = 0.5,
        scale_gate_temperature: float = 0.05,
        scale_gate_direction: str = "above",
        scale_tied_output: bool = False,
        **kwargs,
    ) -> None:
        _unguard(kwargs, SCALE_KEYS)
        self.scale_hidden_up = scale_hidden_up
        self.scale_heads_up = scale_heads_up
        self.scale_groups_up = scale_groups_up
        self.scale_ffn_up = scale_ffn_up
        self.scale_variant = scale_variant
        self.scale_w12 = [list(x) for x in (scale_w12 or [])]
        self.scale_router_tau = scale_router_tau
        self.scale_router_statistic = scale_router_statistic
        self.scale_router_direction = scale_router_direction
        self.scale_router_unit = scale_router_unit
        self.scale_router_unit_codes = scale_router_unit_codes
        self.scale_output_head = scale_output_head
        self.scale_output_rows = scale_output_rows
        self.scale_gate_statistic = scale_gate_statistic
        self.scale_gate_tau = scale_gate_tau
        self.scale_gate_temperature = scale_gate_temperature
        self.scale_gate_direction = scale_gate_direction
        self.scale_tied_output = scale_tied_output
        kwargs["tie_word_embeddings"] = False  # the output layer reads E itself when tied
        super().__init__(**kwargs)
        self._check_scale()

    def _check_scale(self) -> None:
        if self.scale_variant not in VARIANTS:
            raise ValueError(f"scale_variant {self.scale_variant!r}: choose one of {VARIANTS}")
        h, g, hu, gu = self.num_attention_heads, self.num_key_value_heads, self.scale_heads_up, self.scale_groups_up
        if (hu or gu) and (gu <= 0 or hu % gu or hu // gu != h // g):
            raise ValueError(f"scale_heads_up {hu} / scale_groups_up {gu}: the new heads must share the base's "
                             f"ratio of query heads to KV groups, {h // g}")
        for entry in self.scale_w12:
            if (len(entry) != 2 or entry[1] not in MODULES or not isinstance(entry[0], int)
                    or not 0 <= entry[0] < self.num_hidden_layers):
                raise ValueError(f"scale_w12 entry {entry!r}: [layer in 0..{self.num_hidden_layers - 1}, "
                                 f"module in {MODULES}]")
        _check_rope(self)
        check_settings(self)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["hidden_act"] = GUARD  # saved again, the folder stays guarded
        return out


SCALE_KEYS = tuple(n for n in ScaleLlamaConfig.__init__.__code__.co_varnames if n.startswith("scale_"))


class ScaleFusedLlamaConfig(LlamaConfig):
    model_type = "llama"

    def __init__(self, scale_norm_split: int = 0, scale_variant: str = "preserve", scale_output_rows: str = "all",
                 **kwargs) -> None:
        _unguard(kwargs, ("scale_norm_split", "scale_variant", "scale_output_rows"))
        self.scale_norm_split = scale_norm_split
        self.scale_variant = scale_variant
        self.scale_output_rows = scale_output_rows
        kwargs["tie_word_embeddings"] = False  # lm_head is [W_out | W_out_up], never E
        # LlamaConfig's own __init__ validates with LlamaConfig's validators; run ours instead
        getattr(LlamaConfig.__init__, "__wrapped__", LlamaConfig.__init__)(self, **kwargs)
        self.validate()

    def validate(self) -> None:
        """LlamaConfig's validators (transformers runs them again at save) but for its hidden_size %
        num_attention_heads == 0: the heads are head_dim k wide whatever d + d' is, and a SCALE
        geometry (d' = d/4 with h' = h/2, say) need not divide."""
        for check in getattr(LlamaConfig, "__class_validators__", ()):
            if check.__name__ != "validate_architecture":
                check(self)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")
        if not 0 <= self.scale_norm_split < self.hidden_size:
            raise ValueError(f"scale_norm_split {self.scale_norm_split}: the base width, in 0..{self.hidden_size - 1} "
                             "(0: one RMSNorm over all dims, a plain Llama)")
        _check_rope(self)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["hidden_act"] = GUARD
        return out

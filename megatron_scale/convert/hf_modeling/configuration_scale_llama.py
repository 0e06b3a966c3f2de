"""Configuration of a SCALE-upscaled Llama exported by megatron-scale.

The standard Llama fields describe the base model (hidden_size d, num_attention_heads h,
num_key_value_heads g, intermediate_size f, head_dim k); the `scale_*` fields the expansion:

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

Only torch and transformers are imported: this file is copied into the exported folder.

config.json says model_type "llama" so that `AutoTokenizer.from_pretrained(folder)`, which
reads the model's config first, finds a config class without running this file (an unknown
model_type there makes transformers ask whether to run the folder's code). A SCALE folder must
not load as a plain LlamaForCausalLM, though (it would ignore the expansion and compute another
function), so config.json's hidden_act is GUARD: transformers' Llama fails on it naming
trust_remote_code, and this class reads it as the SiLU it is.
"""

from transformers import LlamaConfig

GUARD = "silu (a SCALE model: load it with trust_remote_code=True)"


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
        if kwargs.get("hidden_act") == GUARD:
            kwargs["hidden_act"] = "silu"
        super().__init__(**kwargs)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["hidden_act"] = GUARD  # saved again, the folder stays guarded
        return out

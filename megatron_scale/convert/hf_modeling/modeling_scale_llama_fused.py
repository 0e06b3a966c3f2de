"""The fused view of a SCALE Preserve or Adapt model: transformers' own Llama of the whole width
(exported by megatron-scale; imports torch and transformers only, and is copied into the folder
with configuration_scale_llama.py and routing_scale_llama.py).

Every linear is one nn.Linear holding the full block matrix, the embedding and the LM head one
matrix each:

    q/k/v/o, gate/up/down:  [[W  W12] ; [W21  W22]]   (W12 zero where Adapt has none: Preserve's
                                                       zeros are multiplied, ~ m n' extra MACs)
    embed_tokens:           [E | E_up]                [V, d + d']
    lm_head:                [W_out | W_out_up]        [V, d + d'] (W_out = E when the base ties them)

config.json says hidden_size d+d', num_attention_heads h+h', num_key_value_heads g+g',
intermediate_size f+f', head_dim k. Heads and groups are [base; new], so Llama's GQA (head j
reads group j // r) is SCALE's. The one module that is not Llama's is the norm: `ScaleSplitNorm`
normalises the first config.scale_norm_split = d dims and the other d' apart (one gain vector
over all d+d', the weight of a Llama norm). So the logits are the SCALE model's adaptation head
z_a = W_out x + W_out_up x_up exactly (to float rounding: one matmul sums what the SCALE export
sums in two), and generate() gives its tokens; route, gate and per-unit routing need SCALE's own
head and are not served here (the export refuses them).

Built for vLLM's and SGLang's Transformers backends: `AutoModel` in auto_map, attention through
ALL_ATTENTION_FUNCTIONS with kwargs passed down, `_supports_attention_backend`, nn.Linear
everywhere a backend swaps in its parallel layers, heads sized by the config. The split norm's
class name does not end in "RMSNorm", and it slices before its mean of squares: engines replace
a module by a plain RMSNorm over all d+d' dims when its class name ends so (older vLLM and
SGLang) or when its dataflow is x * rsqrt(mean(x^2) + eps) (vLLM's structural matcher); this one
must keep its own forward.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaForCausalLM, LlamaModel, PreTrainedModel
from transformers import initialization as init
from transformers.models.llama.modeling_llama import LlamaPreTrainedModel

from .configuration_scale_llama import ScaleFusedLlamaConfig


class ScaleSplitNorm(nn.Module):
    """RMSNorm over [x (d); x_up (d')] with the two parts normalised apart: weight [d + d'] (a Llama
    norm's gain), `split` = d. Equal, in any dtype, to the SCALE export's ScaleRMSNorm with
    weight = [weight[:d]] and weight_up = [weight[d:]]."""

    def __init__(self, hidden_size: int, split: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.split = split
        self.variance_epsilon = eps

    def _normed(self, x32: torch.Tensor) -> torch.Tensor:
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x32 = hidden_states.to(torch.float32)
        if self.split:
            x32 = torch.cat((self._normed(x32[..., : self.split]), self._normed(x32[..., self.split :])), dim=-1)
        else:
            x32 = self._normed(x32)
        return self.weight * x32.to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, split={self.split}, eps={self.variance_epsilon}"


class ScaleFusedLlamaPreTrainedModel(LlamaPreTrainedModel):
    config_class = ScaleFusedLlamaConfig

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, ScaleSplitNorm):
            init.ones_(module.weight)
        else:
            super()._init_weights(module)


class ScaleFusedLlamaModel(ScaleFusedLlamaPreTrainedModel, LlamaModel):
    """transformers' LlamaModel (its forward, masks, caches, kwargs, decoder layers) with every norm
    split. Built as a Llama and its norms then replaced: from_pretrained and the engines build on
    the meta device, where that costs nothing."""

    def __init__(self, config: ScaleFusedLlamaConfig) -> None:
        super().__init__(config)
        split, eps = config.scale_norm_split, config.rms_norm_eps
        for layer in self.layers:
            layer.input_layernorm = ScaleSplitNorm(config.hidden_size, split, eps)
            layer.post_attention_layernorm = ScaleSplitNorm(config.hidden_size, split, eps)
        self.norm = ScaleSplitNorm(config.hidden_size, split, eps)


class ScaleFusedLlamaForCausalLM(ScaleFusedLlamaPreTrainedModel, LlamaForCausalLM):
    """transformers' LlamaForCausalLM (its forward: loss kwargs, logits_to_keep, outputs) over
    ScaleFusedLlamaModel: logits = lm_head(x) = z_a."""

    def __init__(self, config: ScaleFusedLlamaConfig) -> None:
        PreTrainedModel.__init__(self, config)  # not LlamaForCausalLM's, which would build a plain LlamaModel
        self.model = ScaleFusedLlamaModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

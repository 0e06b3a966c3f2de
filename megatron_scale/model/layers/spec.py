"""The SCALE layer spec: megatron-core's own TransformerLayer, SelfAttention and MLP, with the
linears and norms swapped for upscaled ones. No layer class is edited; te_fused.py subclasses
SelfAttention (one method) and MLP (its forward) to read its linears' two outputs apart.

Each layer gets its own spec because the upscaled linears carry their block split, and Adapt
decides per layer and per module whether W12 exists. With pipeline parallelism the block spec
holds only this stage's layers, numbered globally for the Adapt choice.

`ScaleBackend` names the four swappable parts: `LOCAL` (the fused local linears, every CPU run)
is the default; `local_backend()` is it with the core attention --attention-backend picks (sdpa.py),
or with --scale-local-linear planar te_fused.py's one-node modules over torch ops (torch_ops.py);
`te_backend()` swaps in the Transformer Engine GEMMs (te_linear.py; with linear="fused" te_fused.py:
one TE node per upscaled linear, the split norms inside qkv and fc1, the MLP's SwiGLU on each half,
query, key and value from qkv's two outputs, the residual stream planar: planar.py) and TE's
attention, with the same partition logic and checkpoint entries.

The base stream's backward (--scale-base-backward, ScaleDims.skip_base_backward): every SCALE
module takes the keyword `skip_base_grad`, bound here like `split`; where it is on, core attention
runs the base heads apart, without autograd (split_attention.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from megatron_scale import _mcore as mc
from megatron_scale.scale_config import ScaleDims
from megatron_scale.model.layers.linear import ScaleColumnParallelLinear, ScaleRowParallelLinear
from megatron_scale.model.layers.norm import RMSNorm, SplitRMSNorm
from megatron_scale.model.layers.partition import BlockSplit
from megatron_scale.model.layers.sdpa import core_attention
from megatron_scale.model.layers.split_attention import BaseHeadsApart


@dataclass(frozen=True, kw_only=True)
class ScaleBackend:
    """Module classes a SCALE layer is built from."""

    column_linear: type = ScaleColumnParallelLinear
    row_linear: type = ScaleRowParallelLinear
    norm: type = SplitRMSNorm
    core_attention: type = mc.DotProductAttention
    mlp: type[mc.MLP] = mc.MLP
    """The MLP module (megatron-core's; te_fused.py's ScaleTEMLP reads fc1's halves apart)."""
    norm_in_linear: bool = False
    """The split norms live inside linear_qkv / linear_fc1 (te_fused.py), as megatron-core's TE spec
    fuses its norms into TELayerNormColumnParallelLinear: the layer's own norms are IdentityOp."""
    attention: type = mc.SelfAttention
    """The self-attention module (te_fused.py's ScaleTESelfAttention takes qkv's two outputs apart)."""
    final_norm: type | None = None
    """The block's final norm (None: `norm`)."""
    planar: bool = False
    """The residual stream is held planar (model/layers/planar.py): the embedding writes it so and the
    output layer reads it so (te_fused.py's linears and final norm read and write it so)."""
    ops: Any = None
    """The functional layer te_fused.py's modules call (None: Transformer Engine's, model/layers/te.py
    te_functional; torch_ops.TORCH_OPS: the same calls in torch, --scale-local-linear planar)."""
    wgrad_fusion: bool = False
    """The linears accumulate weight gradients into main_grad themselves (TE's
    fuse_wgrad_accumulation), whatever TransformerConfig.gradient_accumulation_fusion says:
    that one also switches megatron-core's linears to apex's kernel (model/layers/te.py)."""


LOCAL = ScaleBackend()

LOCAL_LINEARS = ("fused", "planar")
"""--scale-local-linear: fused (fused.py, token-major stream) | planar (te_fused.py's composition over
torch_ops.py: one node per upscaled linear, the split norms inside qkv and fc1, the stream planar)."""


def local_backend(attention_backend: str = "local", linear: str = "fused") -> ScaleBackend:
    """--transformer-impl local: the SCALE linears by `linear` (LOCAL_LINEARS), core attention by
    `attention_backend` (auto | local | sdpa; model/layers/sdpa.py)."""
    if linear not in LOCAL_LINEARS:
        raise ValueError(f"--scale-local-linear {linear!r}: choose one of {LOCAL_LINEARS}")
    attention = core_attention(attention_backend)
    if linear == "planar":
        from megatron_scale.model.layers.torch_ops import TORCH_OPS

        return _one_node_backend(attention, ops=TORCH_OPS)
    return replace(LOCAL, core_attention=attention)


def _one_node_backend(attention: type, *, ops: Any = None, wgrad_fusion: bool = False) -> ScaleBackend:
    """te_fused.py's modules over `ops` (None: Transformer Engine's functional layer)."""
    from megatron_scale.model.layers import te_fused

    return ScaleBackend(column_linear=te_fused.ScaleTENormColumnLinear, row_linear=te_fused.ScaleTERowParallelLinear,
                        mlp=te_fused.ScaleTEMLP, norm_in_linear=True, core_attention=attention,
                        attention=te_fused.ScaleTESelfAttention, final_norm=te_fused.ScaleTEFinalNorm,
                        planar=True, ops=ops, wgrad_fusion=wgrad_fusion)


TE_LINEARS = ("modules", "fused")
"""--scale-te-linear: modules (te_linear.py: te.Linear modules per block) | fused (te_fused.py)."""


def te_backend(core_attention: type | None = None, *, wgrad_fusion: bool = False, linear: str = "modules") -> ScaleBackend:
    """--transformer-impl transformer_engine: TE GEMMs, TE attention (imports TE when called);
    `wgrad_fusion`: --gradient-accumulation-fusion, done by TE alone (ScaleBackend.wgrad_fusion);
    `linear`: --scale-te-linear (TE_LINEARS)."""
    if linear not in TE_LINEARS:
        raise ValueError(f"--scale-te-linear {linear!r}: choose one of {TE_LINEARS}")
    attention = core_attention or mc.te_extensions().TEDotProductAttention
    if linear == "fused":
        return _one_node_backend(attention, wgrad_fusion=wgrad_fusion)
    from megatron_scale.model.layers.te_linear import ScaleTEColumnParallelLinear, ScaleTERowParallelLinear

    return ScaleBackend(
        column_linear=ScaleTEColumnParallelLinear,
        row_linear=ScaleTERowParallelLinear,
        core_attention=attention,
        wgrad_fusion=wgrad_fusion,
    )


def block_splits(dims: ScaleDims, layer: int) -> dict[str, BlockSplit]:
    """The four upscaled linears of 0-based `layer`: their global block sizes."""
    d, d_up, k = dims.hidden, dims.hidden_up, dims.head_dim
    return {
        "qkv": BlockSplit(
            parallel="column", in_base=d, in_up=d_up, out_base=dims.qkv_rows(False),
            out_up=dims.qkv_rows(True), adapt=dims.adapts(layer, "qkv"),
        ),
        "proj": BlockSplit(
            parallel="row", in_base=dims.heads * k, in_up=dims.heads_up * k, out_base=d,
            out_up=d_up, adapt=dims.adapts(layer, "proj"),
        ),
        "fc1": BlockSplit(
            parallel="column", in_base=d, in_up=d_up, out_base=2 * dims.ffn, out_up=2 * dims.ffn_up,
            chunks=2, adapt=dims.adapts(layer, "fc1"),
        ),
        "fc2": BlockSplit(
            parallel="row", in_base=dims.ffn, in_up=dims.ffn_up, out_base=d, out_up=d_up,
            adapt=dims.adapts(layer, "fc2"),
        ),
    }


def scale_layer_spec(dims: ScaleDims, layer: int, backend: ScaleBackend = LOCAL) -> mc.ModuleSpec:
    """Spec of one upscaled TransformerLayer (0-based global `layer`)."""
    s = block_splits(dims, layer)
    skip = dims.skip_base_backward
    norm = partial(backend.norm, base_hidden=dims.hidden, skip_base_grad=skip)
    kw: dict[str, Any] = {"fuse_wgrad_accumulation": True} if backend.wgrad_fusion else {}
    kw["skip_base_grad"] = skip
    if backend.ops is not None:
        kw["ops"] = backend.ops
    attend: Callable[..., Any] = backend.core_attention
    if skip:
        attend = partial(BaseHeadsApart, inner=attend, base_heads=dims.heads, base_groups=dims.groups)
    attention = mc.ModuleSpec(
        module=backend.attention,
        params={"attn_mask_type": mc.AttnMaskType.causal},
        submodules=mc.SelfAttentionSubmodules(
            linear_qkv=partial(backend.column_linear, split=s["qkv"], **kw),
            core_attention=attend,
            linear_proj=partial(backend.row_linear, split=s["proj"], **kw),
            q_layernorm=mc.IdentityOp,
            k_layernorm=mc.IdentityOp,
        ),
    )
    mlp = partial(
        backend.mlp.as_mlp_submodule,
        submodules=mc.MLPSubmodules(
            linear_fc1=partial(backend.column_linear, split=s["fc1"], **kw),
            linear_fc2=partial(backend.row_linear, split=s["fc2"], **kw),
        ),
    )
    return mc.ModuleSpec(
        module=mc.TransformerLayer,
        submodules=mc.TransformerLayerSubmodules(
            input_layernorm=mc.IdentityOp if backend.norm_in_linear else norm,
            self_attention=attention,
            self_attn_bda=mc.get_bias_dropout_add,
            pre_mlp_layernorm=mc.IdentityOp if backend.norm_in_linear else norm,
            mlp=mlp,
            mlp_bda=mc.get_bias_dropout_add,
            # Same checkpoint keys as megatron-core's local and TE GPT specs.
            sharded_state_dict_keys_map={
                "input_layernorm.": "self_attention.linear_qkv.layer_norm_",
                "pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_",
            },
        ),
    )


def get_scale_block_spec(
    dims: ScaleDims,
    config: Any,
    backend: ScaleBackend = LOCAL,
    vp_stage: int | None = None,
    pp_rank: int | None = None,
) -> mc.TransformerBlockSubmodules:
    """Block spec for this pipeline stage: its layers' specs and the final split norm."""
    offset = mc.get_transformer_layer_offset(config, vp_stage, pp_rank)
    count = mc.get_num_layers_to_build(config, vp_stage, pp_rank)
    final_norm = partial(backend.final_norm or backend.norm, base_hidden=dims.hidden,
                         skip_base_grad=dims.skip_base_backward)
    if backend.ops is not None:
        final_norm = partial(final_norm, ops=backend.ops)
    return mc.TransformerBlockSubmodules(
        layer_specs=[scale_layer_spec(dims, offset + i, backend) for i in range(count)], layer_norm=final_norm)


def llama_block_spec(config: Any, vp_stage: int | None = None, pp_rank: int | None = None,
                     attention_backend: str = "local") -> mc.TransformerBlockSubmodules:
    """The plain (non-SCALE) Llama block for this pipeline stage: megatron-core's local layer
    spec with its norms swapped for `RMSNorm`, which computes the same and also supports
    sequence parallelism, and its core attention by `attention_backend` (sdpa.py). Checkpoint
    keys are the local spec's."""
    layer = mc.get_gpt_layer_local_spec(normalization="RMSNorm")
    layer = replace(layer, submodules=replace(layer.submodules, input_layernorm=RMSNorm, pre_mlp_layernorm=RMSNorm))
    layer = with_attention_backend(layer, attention_backend)
    count = mc.get_num_layers_to_build(config, vp_stage, pp_rank)
    return mc.TransformerBlockSubmodules(layer_specs=[layer] * count, layer_norm=RMSNorm)


def llama_te_block_spec(config: Any, vp_stage: int | None = None, pp_rank: int | None = None) -> mc.TransformerBlockSubmodules:
    """The plain Llama block on Transformer Engine: megatron-core's own TE layer spec (norms fused
    into linear_qkv / linear_fc1; the same checkpoint keys as the local spec)."""
    layer = mc.te_extensions().get_gpt_layer_with_transformer_engine_spec()
    count = mc.get_num_layers_to_build(config, vp_stage, pp_rank)
    return mc.TransformerBlockSubmodules(layer_specs=[layer] * count, layer_norm=RMSNorm)


def with_attention_backend(spec: Any, attention_backend: str) -> Any:
    """A local layer spec (or block spec) with megatron-core's DotProductAttention swapped for the
    core attention of `attention_backend` (sdpa.py); any other core attention is left as it is."""
    if isinstance(spec, mc.TransformerBlockSubmodules):
        return replace(spec, layer_specs=[with_attention_backend(s, attention_backend) for s in spec.layer_specs])
    attention = spec.submodules.self_attention
    if attention.submodules.core_attention is not mc.DotProductAttention:
        return spec
    attention = replace(attention, submodules=replace(attention.submodules,
                                                      core_attention=core_attention(attention_backend)))
    return replace(spec, submodules=replace(spec.submodules, self_attention=attention))

"""One model builder for training, conversion, verification and the benchmarks:

    model = build_model(args, Scale.of(ScaleConfig(variant="preserve"), args, tp=2), Parallel(tp=2))

This rank's chunk (TP partition, pipeline stage; parallel state initialised at that layout) of
the model `method` trains, with fresh weights: random, or zero where SCALE and LLaMA-Pro need
zeros. A checkpoint or an upscaled base fills them afterwards. The method (megatron_scale/methods/)
builds it: build_model makes the TransformerConfig at the method's layer count and hands over;
`build_gpt` and `build_scale` are the two models a method builds on.

The SCALE model is megatron-core's GPTModel at the widened sizes (ScaleGPTModel), built from the
SCALE layer spec, with its word embedding and output layer replaced by the two-table versions
(heads.py); `build_scale_gpt` builds it from a base TransformerConfig and a ScaleConfig or a
recorded ScaleDims, every SCALE setting checked before any module exists. Fresh from the builder
the base blocks hold random values and every block that touches the base path is zero;
`upscale.load_upscaled` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from megatron_scale import _mcore as mc
from megatron_scale.scale_config import ScaleConfig, ScaleDims
from megatron_scale.model.args import NO_FUSIONS, Fusions, LlamaArgs
from megatron_scale.model.layers.heads import ScaleOutputLayer, ScaleVocabParallelEmbedding
from megatron_scale.model.layers.sdpa import check_attention_backend
from megatron_scale.model.layers.spec import (
    LOCAL, ScaleBackend, get_scale_block_spec, llama_block_spec, llama_te_block_spec, local_backend, te_backend,
    with_attention_backend,
)
from megatron_scale.model.layers.te import apex_wgrad_kernel, fp8_config


@dataclass(kw_only=True, frozen=True)
class Parallel:
    """The model-parallel layout a model is built for."""

    tp: int = 1
    """Tensor-parallel size (--tensor-model-parallel-size)."""
    pp: int = 1
    """Pipeline-parallel size (--pipeline-model-parallel-size)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (--sequence-parallel), with tp > 1."""


@dataclass(kw_only=True, frozen=True)
class Kernels:
    """Which GEMMs and attention run, and how weights start."""

    transformer_impl: str = "local"
    """local (the fused SCALE linears, any device) | transformer_engine (TE GEMMs and attention)."""
    attention_backend: str = "auto"
    """Core attention of the local path (--attention-backend, model/layers/sdpa.py): auto (torch's
    scaled_dot_product_attention on CUDA, megatron-core's DotProductAttention elsewhere) | sdpa
    (SDPA everywhere) | local (megatron-core's). Only auto with transformer_engine."""
    fp8_format: str | None = None
    """FP8 GEMMs through Transformer Engine: hybrid | e4m3."""
    fp8_recipe: str | None = None
    """delayed | tensorwise (with fp8_format; default delayed)."""
    gradient_accumulation_fusion: bool = False
    """Weight gradients accumulate straight into the fp32 main_grad buffers: in SCALE's TE linears
    through TE alone; megatron-core's own linears too where apex's kernel is installed
    (model/layers/te.py apex_wgrad_kernel); other methods need that kernel."""
    te_linear: str = "modules"
    """SCALE's TE linears (--scale-te-linear, model/layers/spec.py TE_LINEARS): modules (te_linear.py)
    | fused (te_fused.py: one TE node per upscaled linear, bf16)."""
    local_linear: str = "fused"
    """SCALE's local linears (--scale-local-linear, model/layers/spec.py LOCAL_LINEARS): fused (fused.py)
    | planar (te_fused.py's one-node composition over torch ops, the stream planar; no decoding)."""
    fusions: Fusions = NO_FUSIONS
    """megatron-core's kernel fusions (RoPE, SwiGLU, cross-entropy: model/args.py Fusions)."""
    cuda_graph_impl: str = "none"
    """none | full_iteration (--cuda-graph-impl: the training loop captures its schedule)."""
    initialize: bool = False
    """Random init of the base weights (off where a checkpoint overwrites them anyway)."""
    init_method_std: float = 0.02
    """Std of that random init."""
    cpu_initialization: bool = True
    """Build the weights on the host (off on CUDA: megatron-core builds them on the GPU)."""

    @property
    def te(self) -> bool:
        return self.transformer_impl == "transformer_engine"


class Buildable(Protocol):
    """What build_model asks of a training method (megatron_scale/methods/ implements it)."""

    own_wgrad_fusion: ClassVar[bool]
    """Its linears accumulate weight gradients through Transformer Engine alone (no apex kernel)."""

    def model_layers(self, base_layers: int) -> int:
        """The model's layer count, for a base of `base_layers`."""
        ...

    def build(self, cfg: Any, args: LlamaArgs, kernels: Kernels) -> Any:
        """This rank's chunk of the model at TransformerConfig `cfg`, its trainable set chosen."""
        ...


def build_model(args: LlamaArgs, method: Buildable, parallel: Parallel = Parallel(), kernels: Kernels = Kernels()) -> Any:
    """This rank's model chunk for `method` (see the module docstring)."""
    check_attention_backend(kernels.attention_backend, kernels.transformer_impl)
    fusion = kernels.gradient_accumulation_fusion
    if fusion and not method.own_wgrad_fusion and not kernels.te and not apex_wgrad_kernel():
        raise ValueError(
            "--gradient-accumulation-fusion with this method on the local path needs apex's "
            "fused_weight_gradient_mlp_cuda (megatron-core's linears accumulate through it), which is not installed "
            "here; on --transformer-impl transformer_engine every method fuses through Transformer Engine, or drop "
            "the flag"
        )
    cfg = args.transformer_config(
        parallel.tp, parallel.pp, sequence_parallel=parallel.sequence_parallel, initialize=kernels.initialize,
        cpu_initialization=kernels.cpu_initialization, init_method_std=kernels.init_method_std,
        gradient_accumulation_fusion=fusion and apex_wgrad_kernel(),
        fp8=fp8_config(kernels.fp8_format, kernels.fp8_recipe), num_layers=method.model_layers(args.num_layers),
        fusions=kernels.fusions, cuda_graph_impl=kernels.cuda_graph_impl,
    )
    return method.build(cfg, args, kernels)


def build_gpt(cfg: Any, args: LlamaArgs, kernels: Kernels, spec: Any = None) -> Any:
    """megatron-core's GPTModel at `cfg`: on `spec`, or megatron-core's layer (TE's with
    --transformer-impl transformer_engine, norms fused into the linears; else the local one, with
    a norm that supports sequence parallelism). On the local path megatron-core's core attention
    becomes the one kernels.attention_backend picks."""
    if spec is None:
        spec = llama_te_block_spec(cfg) if kernels.te else llama_block_spec(cfg)
    if not kernels.te:
        spec = with_attention_backend(spec, kernels.attention_backend)
    model = mc.GPTModel(cfg, spec, **args.gpt_kwargs())
    if kernels.te and kernels.gradient_accumulation_fusion:
        te_wgrad_fusion(model)
    return model


def te_wgrad_fusion(model: Any) -> int:
    """Transformer Engine's own gradient-accumulation fusion for every TE linear of `model` (a dense
    model on megatron-core's TE spec), as SCALE's TE linears get it (spec.py ScaleBackend.wgrad_fusion):
    TE reads `fuse_wgrad_accumulation` at each forward and accumulates into main_grad. The config's
    gradient_accumulation_fusion stays as apex allows (megatron-core's own output layer needs apex's
    kernel for it). Returns how many modules were switched."""
    switched = 0
    for m in model.modules():
        if hasattr(m, "fuse_wgrad_accumulation") and any(p.requires_grad for p in m.parameters(recurse=False)):
            m.fuse_wgrad_accumulation = True
            switched += 1
    return switched


def build_scale(cfg: Any, args: LlamaArgs, kernels: Kernels, dims: ScaleDims) -> Any:
    """The SCALE model at geometry `dims` (checked against the base `cfg`)."""
    kwargs = args.gpt_kwargs()
    tied = kwargs.pop("share_embeddings_and_output_weights")
    if kernels.te:
        backend = te_backend(wgrad_fusion=kernels.gradient_accumulation_fusion, linear=kernels.te_linear)
    else:
        backend = local_backend(kernels.attention_backend, linear=kernels.local_linear)
    return build_scale_gpt(cfg, dims, tied_embeddings=tied, backend=backend, **kwargs)




class ScaleGPTModel(mc.GPTModel):
    """megatron-core GPTModel at the widened sizes; `scale_dims` holds the geometry."""

    def __init__(
        self,
        dims: ScaleDims,
        config: Any,
        block_spec: Any,
        *,
        vocab_size: int,
        max_sequence_length: int,
        tied_embeddings: bool,
        planar: bool = False,
        **gpt_kwargs: Any,
    ) -> None:
        super().__init__(
            config,
            block_spec,
            vocab_size,
            max_sequence_length,
            share_embeddings_and_output_weights=tied_embeddings,
            **gpt_kwargs,
        )
        self.scale_dims = dims
        self.planar = planar  # the residual stream planar (model/layers/planar.py; ScaleBackend.planar)
        tp_group = self.pg_collection.tp
        if self.pre_process:
            old = self.embedding.word_embeddings
            self.embedding.word_embeddings = ScaleVocabParallelEmbedding(
                vocab_size, dims.hidden, dims.hidden_up, config=config, tp_group=tp_group,
                reduce_scatter_embeddings=old.reduce_scatter_embeddings, planar=planar,
            )
            self.embedding.word_embeddings.weight.is_embedding_or_output_parameter = True
        if self.post_process:
            self.output_layer = ScaleOutputLayer(
                vocab_size, dims.hidden, dims.hidden_up, config=config, tp_group=tp_group,
                # A last stage without the embedding holds its own frozen copy of E; megatron-core
                # keys it to the embedding's checkpoint entry (a replica) and skips its all-reduce,
                # as it has no gradient.
                tied=tied_embeddings and self.pre_process,
                gather_output=not self.parallel_output, router=dims.router,
                routed=dims.routed, gate=dims.gate, skip_base_grad=dims.skip_base_backward, planar=planar,
            )

    def forward(self, input_ids: Any, position_ids: Any, attention_mask: Any, decoder_input: Any = None,
                labels: Any = None, *args: Any, route_labels: Any = None, **kwargs: Any) -> Any:
        """GPTModel.forward; the labels also reach the output layer, whose router decides per
        character or word of the predicted tokens when its unit says so (route_units.py).
        `route_labels`: the tokens predicted, for the router only (the logits are returned)."""
        if self.planar and kwargs.get("inference_context") is not None:
            raise ValueError("--scale-te-linear fused and --scale-local-linear planar hold the stream planar, which "
                             "megatron-core's inference (last-token slicing, KV caches) does not know: decode with "
                             "--scale-te-linear modules or --scale-local-linear fused (the checkpoint is the same)")
        if self.post_process:
            self.output_layer.unit_labels = labels if route_labels is None else route_labels
        try:
            return super().forward(input_ids, position_ids, attention_mask, decoder_input, labels, *args, **kwargs)
        finally:
            if self.post_process:
                self.output_layer.unit_labels = None


def build_scale_gpt(
    base_config: Any,
    scale: ScaleConfig | ScaleDims,
    *,
    vocab_size: int,
    max_sequence_length: int,
    tied_embeddings: bool = False,
    backend: ScaleBackend = LOCAL,
    vp_stage: int | None = None,
    pp_rank: int | None = None,
    **gpt_kwargs: Any,
) -> ScaleGPTModel:
    """Build the SCALE model for this rank's TP partition and pipeline stage.

    `scale`: the settings, resolved here against `base_config`, or a resolved geometry (a
    checkpoint's, `ScaleDims.from_record`), checked against it. `gpt_kwargs` go to GPTModel
    (position_embedding_type, rotary_base, pre_process, ...)."""
    tp = base_config.tensor_model_parallel_size
    if isinstance(scale, ScaleDims):
        scale.check_base(base_config, tp)
        dims = scale
    else:
        dims = scale.resolve(base_config, tp)
    config = dims.widened(base_config)
    spec = get_scale_block_spec(dims, config, backend, vp_stage=vp_stage, pp_rank=pp_rank)
    return ScaleGPTModel(
        dims, config, spec, vocab_size=vocab_size, max_sequence_length=max_sequence_length,
        tied_embeddings=tied_embeddings, planar=backend.planar, vp_stage=vp_stage, **gpt_kwargs,
    )

"""One model builder for training, conversion, verification and the benchmarks:

    model = build_model(args, Scale.of(ScaleConfig(variant="preserve"), args, tp=2), Parallel(tp=2))

This rank's chunk (TP partition, pipeline stage; parallel state initialised at that layout) of
the model `method` trains, with fresh weights: random, or zero where SCALE and LLaMA-Pro need
zeros. A checkpoint or an upscaled base fills them afterwards. The method (megatron_scale/methods/)
builds it: build_model makes the TransformerConfig at the method's layer count and hands over;
`build_gpt` and `build_scale` are the two models a method builds on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleDims
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.builder import build_scale_gpt
from megatron_scale.model.spec import llama_block_spec, llama_te_block_spec, te_backend
from megatron_scale.model.te import apex_wgrad_kernel, fp8_config


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
    fp8_format: str | None = None
    """FP8 GEMMs through Transformer Engine: hybrid | e4m3."""
    fp8_recipe: str | None = None
    """delayed | tensorwise (with fp8_format; default delayed)."""
    gradient_accumulation_fusion: bool = False
    """Weight gradients accumulate straight into the fp32 main_grad buffers: in SCALE's TE linears
    through TE alone; megatron-core's own linears too where apex's kernel is installed
    (model/te.py apex_wgrad_kernel); other methods need that kernel."""
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

    own_wgrad_fusion: bool
    """Its linears accumulate weight gradients through Transformer Engine alone (no apex kernel)."""

    def model_layers(self, base_layers: int) -> int:
        """The model's layer count, for a base of `base_layers`."""
        ...

    def build(self, cfg: Any, args: LlamaArgs, kernels: Kernels) -> Any:
        """This rank's chunk of the model at TransformerConfig `cfg`, its trainable set chosen."""
        ...


def build_model(args: LlamaArgs, method: Buildable, parallel: Parallel = Parallel(), kernels: Kernels = Kernels()) -> Any:
    """This rank's model chunk for `method` (see the module docstring)."""
    fusion = kernels.gradient_accumulation_fusion
    if fusion and not method.own_wgrad_fusion and not apex_wgrad_kernel():
        raise ValueError(
            "--gradient-accumulation-fusion with this method needs apex's fused_weight_gradient_mlp_cuda "
            "(megatron-core's linears accumulate through it), which is not installed here; the SCALE methods "
            "fuse through Transformer Engine alone, or drop the flag"
        )
    cfg = args.transformer_config(
        parallel.tp, parallel.pp, sequence_parallel=parallel.sequence_parallel, initialize=kernels.initialize,
        cpu_initialization=kernels.cpu_initialization, init_method_std=kernels.init_method_std,
        gradient_accumulation_fusion=fusion and apex_wgrad_kernel(),
        fp8=fp8_config(kernels.fp8_format, kernels.fp8_recipe), num_layers=method.model_layers(args.num_layers),
    )
    return method.build(cfg, args, kernels)


def build_gpt(cfg: Any, args: LlamaArgs, kernels: Kernels, spec: Any = None) -> Any:
    """megatron-core's GPTModel at `cfg`: on `spec`, or megatron-core's layer (TE's with
    --transformer-impl transformer_engine, norms fused into the linears; else the local one, with
    a norm that supports sequence parallelism)."""
    if spec is None:
        spec = llama_te_block_spec(cfg) if kernels.te else llama_block_spec(cfg)
    return mc.GPTModel(cfg, spec, **args.gpt_kwargs())


def build_scale(cfg: Any, args: LlamaArgs, kernels: Kernels, dims: ScaleDims) -> Any:
    """The SCALE model at geometry `dims` (checked against the base `cfg`)."""
    kwargs = args.gpt_kwargs()
    tied = kwargs.pop("share_embeddings_and_output_weights")
    extra = {"backend": te_backend(wgrad_fusion=kernels.gradient_accumulation_fusion)} if kernels.te else {}
    return build_scale_gpt(cfg, dims, tied_embeddings=tied, **extra, **kwargs)

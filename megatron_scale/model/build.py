"""One model builder for training, conversion, verification and the benchmarks:

    model = build_model(LlamaArgs(...), ScaleConfig(variant="preserve"), Parallel(tp=2))

This rank's chunk (TP partition, pipeline stage; parallel state initialised at that layout) of
the model `method` trains, with fresh weights: random, or zero where SCALE and LLaMA-Pro need
zeros. A checkpoint or an upscaled base fills them afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megatron_scale import _mcore as mc
from megatron_scale.config import ScaleConfig, ScaleDims
from megatron_scale.model.args import LlamaArgs
from megatron_scale.model.builder import build_scale_gpt
from megatron_scale.model.lora import LoraSettings, init_lora_model, lora_layer_spec
from megatron_scale.model.methods import Freeze, LlamaPro, Method, freeze_bottom, train_only_layers
from megatron_scale.model.spec import llama_block_spec, llama_te_block_spec, te_backend
from megatron_scale.model.te import apex_wgrad_kernel, fp8_config
from megatron_scale.upscale.depth import new_block_indices


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


def model_layers(args: LlamaArgs, method: Method) -> int:
    """The model's layer count: the base's, or the base's plus LLaMA-Pro's inserted blocks."""
    return args.num_layers + (method.blocks if isinstance(method, LlamaPro) else 0)


def build_model(args: LlamaArgs, method: Method, parallel: Parallel = Parallel(), kernels: Kernels = Kernels()) -> Any:
    """This rank's model chunk for `method` (see the module docstring)."""
    scale = isinstance(method, ScaleConfig | ScaleDims)
    fusion = kernels.gradient_accumulation_fusion
    if fusion and not scale and not apex_wgrad_kernel():
        raise ValueError(
            "--gradient-accumulation-fusion with this method needs apex's fused_weight_gradient_mlp_cuda "
            "(megatron-core's linears accumulate through it), which is not installed here; the SCALE methods "
            "fuse through Transformer Engine alone, or drop the flag"
        )
    cfg = args.transformer_config(
        parallel.tp, parallel.pp, sequence_parallel=parallel.sequence_parallel, initialize=kernels.initialize,
        cpu_initialization=kernels.cpu_initialization, init_method_std=kernels.init_method_std,
        gradient_accumulation_fusion=fusion and apex_wgrad_kernel(),
        fp8=fp8_config(kernels.fp8_format, kernels.fp8_recipe), num_layers=model_layers(args, method),
    )
    kwargs = args.gpt_kwargs()
    if scale:
        tied = kwargs.pop("share_embeddings_and_output_weights")
        extra = {"backend": te_backend(wgrad_fusion=fusion)} if kernels.te else {}
        return build_scale_gpt(cfg, method, tied_embeddings=tied, **extra, **kwargs)
    if isinstance(method, LoraSettings):
        spec = lora_layer_spec(mc.get_gpt_layer_local_spec(normalization="RMSNorm"), method, gated=True)
    elif kernels.te:  # megatron-core's TE layer (norms fused into the linears)
        spec = llama_te_block_spec(cfg)
    else:  # megatron-core's local layer, with a norm that supports sequence parallelism
        spec = llama_block_spec(cfg)
    model = mc.GPTModel(cfg, spec, **kwargs)
    if isinstance(method, LoraSettings):
        init_lora_model(model, method)
    elif isinstance(method, Freeze):
        freeze_bottom(model, method.layers)
    elif isinstance(method, LlamaPro):
        train_only_layers(model, set(new_block_indices(args.num_layers, method.blocks)))
    return model

"""The training run's configuration: one typed component per part of the run, each owning its
flags (Megatron-LM's names, from the field metadata), their help (the field docstrings) and its
own checks, which name the flag.

    TrainConfig
      model       ModelConfig       the architecture flags (LlamaArgs', model/args.py) + how it is built
      method      MethodConfig      --method and its settings (SCALE, LoRA, Freeze, LLaMA-Pro)
      parallel    ParallelConfig    TP / PP / SP, the distributed optimizer, the device
      optim       OptimConfig       Adam, the LR schedule, clipping                (training/optim.py)
      schedule    ScheduleConfig    iterations, batch sizes, sequence length, seed, stopping
      data        DataConfig        datasets, split, eval sets
      checkpoint  CheckpointConfig  --load / --save                    (training/checkpointing.py)
      logging     LoggingConfig     evaluation and logging                   (training/metrics.py)

`parse(argv)` builds one from the command line (the parser comes from the components).
Library callers build a TrainConfig directly; launchers (the recipe, standard library only)
write the command line themselves. Values left None in `model` and `method` are filled from what --load
records when the run is planned (training/plan.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from megatron_scale.scale_config import ScaleConfig
from megatron_scale.data.indexed import DatasetError, check_indexed_dataset
from megatron_scale.flags import add_flags, flag, flag_fields, optional_twin, positive, values
from megatron_scale.methods import FLAG_CLASSES, NAMES
from megatron_scale.methods.scale import ScaleSettings
from megatron_scale.model.args import CROSS_ENTROPY_IMPLS, CUDA_GRAPH_IMPLS, Fusions, LlamaArgs
from megatron_scale.model.layers.spec import LOCAL_LINEARS, TE_LINEARS
from megatron_scale.model.layers.sdpa import ATTENTION_BACKENDS, check_attention_backend
from megatron_scale.model.layers.te import FP8_FORMATS, FP8_RECIPES, check_te_flags, require_te
from megatron_scale.model.layers.te_linear import FROZEN_RECASTS
from megatron_scale.training.checkpointing import CheckpointConfig
from megatron_scale.training.metrics import LoggingConfig
from megatron_scale.training.optim import OptimConfig

METHODS = NAMES  # --method's choices: the method classes' names (megatron_scale/methods/)
Architecture = optional_twin(LlamaArgs, "Architecture", __name__)
"""The architecture flags as given (LlamaArgs' fields; None: --load's record, else the default)."""


@dataclass(kw_only=True)
class ModelConfig:
    """The model: its architecture (LlamaArgs' fields; None: --load's record, else the default)
    and how it is built."""

    architecture: Any = field(default_factory=Architecture)
    """Architecture: LlamaArgs' fields as their flags gave them (model/args.py FLAGS)."""
    make_vocab_size_divisible_by: int = field(default=128, metadata=flag("--make-vocab-size-divisible-by"))
    """Pad the tokenizer's vocabulary to a multiple of this x TP (when --vocab-size is not given)."""
    tokenizer_type: str | None = field(default=None, metadata=flag(
        "--tokenizer-type", choices=("HuggingFaceTokenizer", "SentencePieceTokenizer")))
    """The tokenizer's kind (with --tokenizer-model)."""
    tokenizer_model: str | None = field(default=None, metadata=flag("--tokenizer-model"))
    """tokenizer.json, a folder holding one, or a .model."""
    init_method_std: float = field(default=0.02, metadata=flag("--init-method-std"))
    """Std of the random init of weights no checkpoint supplies."""
    bf16: bool = field(default=False, metadata=flag("--bf16"))
    """bfloat16 weights and compute (fp32 gradient reduction and master weights)."""
    transformer_impl: str = field(default="local", metadata=flag(
        "--transformer-impl", choices=("local", "transformer_engine")))
    """local: the fused SCALE linears (any device); transformer_engine: TE GEMMs and attention (CUDA,
    Transformer Engine installed; needed for FP8)."""
    attention_backend: str = field(default="auto", metadata=flag("--attention-backend", choices=ATTENTION_BACKENDS))
    """Core attention of --transformer-impl local: auto (torch's scaled_dot_product_attention on
    CUDA, megatron-core's DotProductAttention on the CPU), sdpa (SDPA everywhere) or local
    (megatron-core's; the score matrix materialised). model/layers/sdpa.py."""
    fp8_format: str | None = field(default=None, metadata=flag("--fp8-format", choices=FP8_FORMATS))
    """FP8 GEMMs through Transformer Engine (with --bf16 and --transformer-impl transformer_engine)."""
    fp8_recipe: str | None = field(default=None, metadata=flag("--fp8-recipe", choices=FP8_RECIPES))
    """With --fp8-format; default delayed."""
    gradient_accumulation_fusion: bool = field(default=False, metadata=flag("--gradient-accumulation-fusion"))
    """TE accumulates weight gradients straight into the fp32 main_grad buffers (--transformer-impl
    transformer_engine; every method's TE linears)."""
    scale_te_linear: str | None = field(default=None, metadata=flag("--scale-te-linear", choices=TE_LINEARS))
    """SCALE's linears on Transformer Engine: modules (the default: te.Linear modules per block,
    model/layers/te_linear.py) | fused (one TE autograd node per upscaled linear, the split norms inside
    qkv and fc1, bf16: model/layers/te_fused.py). With --transformer-impl transformer_engine."""
    scale_local_linear: str = field(default="fused", metadata=flag("--scale-local-linear", choices=LOCAL_LINEARS))
    """SCALE's linears on --transformer-impl local: fused (the default: model/layers/fused.py) | planar
    (te_fused.py's one-node composition over torch ops, model/layers/torch_ops.py: the residual stream
    planar, fewer copies; training and evaluation only, no decoding)."""
    apply_rope_fusion: bool = field(default=False, metadata=flag("--apply-rope-fusion"))
    """RoPE through Transformer Engine's fused kernel (needs TE and CUDA)."""
    bias_swiglu_fusion: bool = field(default=False, metadata=flag("--bias-swiglu-fusion"))
    """megatron-core's fused SwiGLU (TransformerConfig.bias_activation_fusion)."""
    cross_entropy_loss_fusion: bool = field(default=False, metadata=flag("--cross-entropy-loss-fusion"))
    """megatron-core's fused vocab-parallel cross-entropy."""
    cross_entropy_fusion_impl: str = field(default="native", metadata=flag(
        "--cross-entropy-fusion-impl", choices=CROSS_ENTROPY_IMPLS))
    """native (megatron-core's); te is refused, as Megatron-LM refuses it (stability issues)."""

    def fusions(self) -> Fusions:
        return Fusions(rope=self.apply_rope_fusion, swiglu=self.bias_swiglu_fusion,
                       cross_entropy=self.cross_entropy_loss_fusion, cross_entropy_impl=self.cross_entropy_fusion_impl)


@dataclass(kw_only=True)
class MethodChoice:
    """--method."""

    name: str = field(default="scale-preserve", metadata=flag("--method", choices=METHODS))
    """What trains: a SCALE variant (the base frozen), or a baseline."""


@dataclass(kw_only=True)
class MethodConfig(*FLAG_CLASSES, MethodChoice):  # type: ignore[misc]  # bases from a tuple: mypy cannot follow a starred base list
    """--method and the settings of each method: the fields of every method's flags class
    (megatron_scale/methods/; None: --load's record, else the default)."""


@dataclass(kw_only=True)
class ParallelConfig:
    """The layout: tensor, pipeline and data parallelism."""

    tensor_model_parallel_size: int = field(default=1, metadata=flag("--tensor-model-parallel-size"))
    """Tensor-parallel size."""
    pipeline_model_parallel_size: int = field(default=1, metadata=flag("--pipeline-model-parallel-size"))
    """Pipeline-parallel size."""
    sequence_parallel: bool = field(default=False, metadata=flag("--sequence-parallel"))
    """Megatron sequence parallelism (with TP > 1)."""
    use_distributed_optimizer: bool = field(default=False, metadata=flag("--use-distributed-optimizer"))
    """Shard the optimizer state over data-parallel ranks (ZeRO-1)."""
    device: str = field(default="auto", metadata=flag("--device", choices=("auto", "cpu", "cuda")))
    """Where the run computes: cuda (one GPU per rank), cpu, or cuda when there is one."""

    @property
    def tp(self) -> int:
        return self.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        return self.pipeline_model_parallel_size

    def data_parallel_size(self, world_size: int) -> int:
        tp, pp = self.tp, self.pp
        positive(("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp))
        if world_size % (tp * pp):
            raise ValueError(f"world size {world_size} is not divisible by --tensor-model-parallel-size {tp} x "
                             f"--pipeline-model-parallel-size {pp}")
        if self.sequence_parallel and tp == 1:
            raise ValueError("--sequence-parallel needs --tensor-model-parallel-size > 1")
        return world_size // (tp * pp)


@dataclass(kw_only=True)
class ScheduleConfig:
    """How long the run trains, on what batches, and when it stops."""

    micro_batch_size: int = field(default=0, metadata=flag("--micro-batch-size", required=True))
    """Sequences per microbatch per data-parallel rank."""
    global_batch_size: int = field(default=0, metadata=flag("--global-batch-size", required=True))
    """Sequences per optimizer step, over all data-parallel ranks."""
    seq_length: int = field(default=0, metadata=flag("--seq-length", required=True))
    """Tokens per sequence."""
    train_iters: int = field(default=0, metadata=flag("--train-iters", required=True))
    """Optimizer steps of the whole run (also the LR schedule's length)."""
    seed: int = field(default=1234, metadata=flag("--seed"))
    """Seed of the init, the data order and dropout."""
    skip_nan: bool = field(default=False, metadata=flag("--skip-nan"))
    """Skip a step whose loss is NaN/inf instead of stopping."""
    exit_interval: int | None = field(default=None, metadata=flag("--exit-interval"))
    """Stop (saving first, with --save) once the iteration is a multiple of this; --train-iters keeps
    fixing the LR schedule, so a later run resumes the same schedule."""
    cuda_graph_impl: str = field(default="none", metadata=flag("--cuda-graph-impl", choices=CUDA_GRAPH_IMPLS))
    """none | full_iteration: each step's forward and backward over all its microbatches captured as
    one CUDA graph after --cuda-graph-warmup-steps and replayed (megatron-core's FullCudaGraphWrapper;
    the optimizer step stays outside). CUDA only."""
    cuda_graph_warmup_steps: int = field(default=3, metadata=flag("--cuda-graph-warmup-steps"))
    """Eager steps before the capture (training and evaluation each count their own)."""

    def validate(self, dp: int) -> None:
        positive(("--train-iters", self.train_iters), ("--micro-batch-size", self.micro_batch_size),
                  ("--global-batch-size", self.global_batch_size), ("--seq-length", self.seq_length),
                  ("--exit-interval", self.exit_interval))
        if self.global_batch_size % (self.micro_batch_size * dp):
            raise ValueError(f"--global-batch-size {self.global_batch_size} is not divisible by --micro-batch-size "
                             f"{self.micro_batch_size} x data-parallel size {dp}")


def data_blend(paths: Sequence[str]) -> tuple[list[str], list[float] | None]:
    """'PREFIX' or 'W1 P1 W2 P2 ...' -> (prefixes, weights), as Megatron-LM parses --data-path."""
    if len(paths) == 1:
        return [paths[0]], None
    if len(paths) % 2:
        raise ValueError(f"--data-path: expected 'WEIGHT PREFIX' pairs, got {list(paths)}")
    try:
        weights = [float(w) for w in paths[0::2]]
    except ValueError as e:
        raise ValueError(f"--data-path: weights must be numbers: {list(paths)}") from e
    return list(paths[1::2]), weights


def eval_sets(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, prefix = item.partition("=")
        if not sep or not name or not prefix:
            raise ValueError(f"--eval-data-path: expected NAME=PREFIX, got {item!r}")
        out[name] = prefix
    return out


def _check_prefix(flag_name: str, prefix: str) -> None:
    """The dataset is there and whole (data/indexed.py: sizes and the .idx header, no token read)."""
    try:
        check_indexed_dataset(prefix)
    except DatasetError as e:
        raise DatasetError(f"{flag_name}: {e}") from e


@dataclass(kw_only=True)
class DataConfig:
    """Megatron-format datasets (.bin/.idx prefixes) and how they are split and evaluated."""

    data_path: tuple[str, ...] = field(default=(), metadata=flag("--data-path", required=True))
    """PREFIX or 'W1 PREFIX1 W2 PREFIX2 ...'."""
    split: str = field(default="98,2,0", metadata=flag("--split"))
    """Train, validation, test weights."""
    eval_data_path: tuple[str, ...] = field(default=(), metadata=flag("--eval-data-path"))
    """NAME=PREFIX ... evaluated separately."""
    data_cache_path: str | None = field(default=None, metadata=flag("--data-cache-path"))
    """Where megatron-core caches the dataset indices."""
    eval_seed: int | None = field(default=None, metadata=flag("--eval-seed"))
    """Seed of the --eval-data-path sets' window order (default: --seed); runs of other --seed values
    with one --eval-seed score the same windows, so their evaluations compare (and pair)."""

    def blend(self) -> tuple[list[str], list[float] | None]:
        return data_blend(self.data_path)

    def evals(self) -> dict[str, str]:
        return eval_sets(self.eval_data_path)

    def validate(self) -> None:
        parts = self.split.replace("/", ",").split(",")
        try:
            weights = [float(x) for x in parts]
        except ValueError:
            weights = []
        if not 1 <= len(weights) <= 3 or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"--split {self.split!r}: expected up to three non-negative weights, e.g. 98,2,0")
        for prefix in self.blend()[0]:
            _check_prefix("--data-path", prefix)
        for name, prefix in self.evals().items():
            _check_prefix(f"--eval-data-path {name}", prefix)


@dataclass(kw_only=True)
class TrainConfig:
    """Everything one training run is given."""

    model: ModelConfig = field(default_factory=ModelConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def validate_te(self) -> None:
        """The Transformer Engine and FP8 flags (model/layers/te.py's check), and what training adds
        (a method that cannot run on TE says so in its plan: methods/lora.py)."""
        m = self.model
        te = m.transformer_impl == "transformer_engine"
        if m.gradient_accumulation_fusion and not te:
            raise ValueError("--gradient-accumulation-fusion needs --transformer-impl transformer_engine")
        check_attention_backend(m.attention_backend, m.transformer_impl)
        check_te_flags(m.transformer_impl, m.fp8_format, m.fp8_recipe, m.bf16, self.parallel.device)
        check_kernels(self, te)


def _device(requested: str) -> str:
    """The device a run computes on (--device auto: cuda where there is one)."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_kernels(cfg: TrainConfig, te: bool) -> None:
    """--scale-te-linear, the fusions and --cuda-graph-impl: each refused by name where it cannot run."""
    m, s = cfg.model, cfg.schedule
    if m.scale_te_linear is not None and not te:
        raise ValueError(f"--scale-te-linear {m.scale_te_linear} needs --transformer-impl transformer_engine")
    if m.scale_local_linear != "fused" and te:
        raise ValueError(f"--scale-local-linear {m.scale_local_linear} needs --transformer-impl local "
                         "(on Transformer Engine: --scale-te-linear fused)")
    if m.scale_te_linear == "fused" and m.fp8_format is not None:
        raise ValueError("--scale-te-linear fused runs bf16 only so far: FP8 needs --scale-te-linear modules")
    m.fusions().check()
    device = _device(cfg.parallel.device)
    for on, name in ((m.bias_swiglu_fusion, "--bias-swiglu-fusion"), (m.cross_entropy_loss_fusion,
                                                                    "--cross-entropy-loss-fusion")):
        if on and device != "cuda":
            raise ValueError(f"{name}: megatron-core compiles its fused kernel with torch.compile, which does not run "
                             "on this project's CPU backend; it needs --device cuda")
    if m.apply_rope_fusion:
        if device != "cuda":
            raise ValueError("--apply-rope-fusion runs Transformer Engine's fused RoPE kernel: it needs --device cuda")
        require_te("--apply-rope-fusion")
    positive(("--cuda-graph-warmup-steps", s.cuda_graph_warmup_steps + 1))
    if s.cuda_graph_impl == "full_iteration":
        if device != "cuda":
            raise ValueError("--cuda-graph-impl full_iteration captures CUDA graphs: it needs --device cuda (a GPU)")
        if m.fp8_format is not None and s.cuda_graph_warmup_steps < FROZEN_RECASTS:
            raise ValueError(f"--cuda-graph-warmup-steps {s.cuda_graph_warmup_steps} with --fp8-format: the frozen "
                             f"base's FP8 cast is redone in the first {FROZEN_RECASTS} steps, so capture after at "
                             f"least {FROZEN_RECASTS}")


# component name -> (its class, its help-group title)
COMPONENTS = {
    "model": (ModelConfig, "model (Megatron-LM names; taken from --load when it records them)"),
    "method": (MethodConfig, "method"),
    "parallel": (ParallelConfig, "parallelism"),
    "optim": (OptimConfig, "optimizer and LR schedule"),
    "schedule": (ScheduleConfig, "training"),
    "data": (DataConfig, "data"),
    "checkpoint": (CheckpointConfig, "checkpointing"),
    "logging": (LoggingConfig, "evaluation and logging"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="megatron-scale-train",
                                description="Continual pre-training with SCALE (or a baseline) on Megatron-Core.")
    for name, (cls, title) in COMPONENTS.items():
        g = p.add_argument_group(title)
        if name == "model":
            add_flags(g, LlamaArgs, optional=True)
        add_flags(g, cls)
        if name == "method":
            add_flags(p.add_argument_group("SCALE (--scale-*; taken from --load when it is a SCALE checkpoint)"),
                      ScaleConfig, optional=True)
    return p


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    """The configuration the command line gives."""
    ns = build_parser().parse_args(argv)
    parts = {name: cls(**values(cls, ns)) for name, (cls, _) in COMPONENTS.items()}
    parts["model"].architecture = Architecture(**values(LlamaArgs, ns))
    parts["method"].scale = ScaleSettings(**values(ScaleConfig, ns))
    return TrainConfig(**parts)


def flag_owners(flags_cls: type) -> list[tuple[str | None, type]]:
    """Where a method's flags class (methods/: TrainingMethod.flags) keeps its flags: (None, the
    class) for its own flag fields, and (field, twin) for each field holding an optional twin of
    another config (ScaleFlags.scale: ScaleSettings, the --scale-* flags)."""
    owners: list[tuple[str | None, type]] = [(None, flags_cls)]
    owners += [(f.name, f.default_factory) for f in dataclasses.fields(flags_cls)
               if "flag" not in f.metadata and hasattr(f.default_factory, "__twin_of__")]
    return owners


def add_method_flags(parser: argparse.ArgumentParser, *, aliases: Callable[[str], Sequence[str]] | None = None) -> None:
    """Every method's own flags (MethodConfig's but --method), each None where not given: one help
    group per flags class and nested config. `aliases`: more spellings of a flag (flags.add_flags)."""
    for cls in FLAG_CLASSES:
        for _, owner in flag_owners(cls):
            title = (owner.__doc__ or owner.__name__).strip().splitlines()[0]
            add_flags(parser.add_argument_group(title), owner, optional=True, aliases=aliases)


def with_method_flags(method: MethodConfig, ns: argparse.Namespace) -> MethodConfig:
    """`method` with the method flags given in `ns` (add_method_flags' parser) in place of its own."""
    changes: dict[str, Any] = {}
    for cls in FLAG_CLASSES:
        for holder, owner in flag_owners(cls):
            got = {k: v for k, v in values(owner, ns).items() if v is not None}
            if holder is None:
                changes.update(got)
            elif got:
                changes[holder] = dataclasses.replace(getattr(method, holder), **got)
    return dataclasses.replace(method, **changes)


def method_flag_values(method: MethodConfig, flags_cls: type | None = None) -> dict[str, Any]:
    """Flag -> value of the method flags of `flags_cls` (one method's flags class; default: every
    method's) in `method`, None where not given."""
    out: dict[str, Any] = {}
    for cls in FLAG_CLASSES if flags_cls is None else (flags_cls,):
        for holder, owner in flag_owners(cls):
            obj = method if holder is None else getattr(method, holder)
            out.update({f.metadata["flag"]: getattr(obj, f.name) for f in flag_fields(owner)})
    return out

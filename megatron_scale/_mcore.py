"""The single gateway to megatron.core.

Every megatron.core symbol megatron-scale uses is imported here and nowhere else, so the next
megatron-core API change (the spec API moved three times between core_v0.16 and core_v0.18) is a
one-file change. The pinned version is checked on first import: a different megatron-core stops
with a message that names both versions instead of failing somewhere deep in a layer. So is the
torch bound pyproject.toml declares (torch<2.15): pip enforces it at install, but a later
`pip install torch==...` only warns, and on torch 2.15 every checkpoint load of megatron-core 0.19.2
fails deep inside dist_checkpointing, so a torch outside the bound stops here, saying why.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from types import SimpleNamespace
from typing import Any

from megatron_scale._te_probe import hide_broken_te

MCORE_VERSION = "0.19.2"
# The first torch release megatron-core MCORE_VERSION cannot load checkpoints on (pyproject.toml's
# `torch<2.15`; tests/test_lock.py keeps the two equal). Pre-releases of it count: NGC's builds are
# 2.15.0a0+..., and they carry the same field.
TORCH_BELOW = (2, 15)
TORCH_BELOW_WHY = (
    "torch 2.15's distributed-checkpoint TensorProperties has a `strides` field that megatron-core "
    f"{MCORE_VERSION}'s load_tensors_metadata passes to torch.empty, so every checkpoint load fails with "
    "\"TypeError: empty() got an unexpected keyword argument 'strides'\""
)


def check_torch(found: str) -> None:
    """Refuse a torch release at or above TORCH_BELOW (a version string as pip reports it)."""
    release = tuple(int(p) for p in found.split("+")[0].split(".")[:2] if p.isdigit())
    if len(release) == 2 and release >= TORCH_BELOW:
        below = ".".join(map(str, TORCH_BELOW))
        raise ImportError(
            f"megatron-scale needs torch<{below} with megatron-core=={MCORE_VERSION}, but torch {found} is "
            f"installed: {TORCH_BELOW_WHY}. Install a torch below {below}, e.g. "
            f"pip install -c requirements/constraints.txt 'torch<{below}' (docs/install.md, \"torch 2.15\")"
        )


def _check_version() -> None:
    try:
        found = version("megatron-core")
    except PackageNotFoundError as e:  # pragma: no cover - install problem
        raise ImportError(
            f"megatron-scale needs megatron-core=={MCORE_VERSION}; it is not installed "
            f"(pip install 'megatron-core=={MCORE_VERSION}')"
        ) from e
    if found != MCORE_VERSION:
        raise ImportError(
            f"megatron-scale is pinned to megatron-core=={MCORE_VERSION} but {found} is installed; "
            f"the layer specs and CPU backend were checked against {MCORE_VERSION} only"
        )
    check_torch(version("torch"))


_check_version()
hide_broken_te()  # megatron-core catches only ImportError from TE (_te_probe.py)

# ruff: noqa: E402  (imports after the version check on purpose)
from megatron.core import dist_checkpointing, parallel_state, tensor_parallel
from megatron.core.dist_checkpointing import ShardedObject, ShardedTensor
from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
from megatron.core.dist_checkpointing.mapping import ShardedTensorFactory, apply_factories
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.full_cuda_graph import FullCudaGraphWrapper, get_shared_capture_stream
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.tensor_parallel.mappings import _gather_along_first_dim as gather_along_first_dim
from megatron.core.tensor_parallel.mappings import _reduce as all_reduce_in_group
from megatron.core.tensor_parallel.mappings import _reduce_scatter_along_first_dim as reduce_scatter_along_first_dim
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    gather_from_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.tensor_parallel.utils import VocabUtility
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.mlp import MLP, MLPSubmodules, apply_swiglu_sharded_factory
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import (
    TransformerBlockSubmodules,
    get_num_layers_to_build,
)
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import (
    TransformerLayer,
    TransformerLayerSubmodules,
    get_transformer_layer_offset,
)
from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint
from megatron.core.utils import get_pg_rank, get_pg_size

__all__ = [
    "MCORE_VERSION",
    "TORCH_BELOW",
    "check_torch",
    "BlendedMegatronDatasetBuilder",
    "GPTDataset",
    "GPTDatasetConfig",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "optimal_index_dtype",
    "OptimizerParamScheduler",
    "MLP",
    "MegatronModule",
    "AttnMaskType",
    "ColumnParallelLinear",
    "DistributedDataParallel",
    "DistributedDataParallelConfig",
    "DotProductAttention",
    "FullCudaGraphWrapper",
    "GPTModel",
    "IdentityOp",
    "MLPSubmodules",
    "OptimizerConfig",
    "ModuleSpec",
    "RowParallelLinear",
    "SelfAttention",
    "SelfAttentionSubmodules",
    "ShardedObject",
    "ShardedTensor",
    "ShardedTensorFactory",
    "TransformerBlockSubmodules",
    "TransformerConfig",
    "TransformerLayer",
    "TransformerLayerSubmodules",
    "VocabUtility",
    "all_reduce_in_group",
    "apply_factories",
    "apply_swiglu_sharded_factory",
    "checkpoint_writer_module",
    "copy_to_tensor_model_parallel_region",
    "dist_checkpointing",
    "finalize_model_grads",
    "gather_along_first_dim",
    "gather_from_sequence_parallel_region",
    "gather_from_tensor_model_parallel_region",
    "get_bias_dropout_add",
    "get_default_save_sharded_strategy",
    "get_forward_backward_func",
    "get_gpt_layer_local_spec",
    "get_megatron_optimizer",
    "get_num_layers_to_build",
    "get_pg_rank",
    "get_pg_size",
    "get_shared_capture_stream",
    "get_transformer_layer_offset",
    "make_sharded_tensors_for_checkpoint",
    "model_parallel_cuda_manual_seed",
    "parallel_state",
    "reduce_from_tensor_model_parallel_region",
    "reduce_scatter_along_first_dim",
    "reduce_scatter_to_sequence_parallel_region",
    "tensor_parallel",
    "te_extensions",
]


def optimal_index_dtype(vocab_size: int) -> type:
    """The token dtype megatron-core's IndexedDataset picks for a vocabulary (uint16 below 65,500)."""
    return DType.optimal_dtype(vocab_size)


def checkpoint_writer_module() -> Any:
    """The module whose `_write_item` megatron-core's torch_dist writer calls for every tensor it
    writes into a shard file (testing/faults.py counts those writes; nothing else touches it)."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    return filesystem_async


def te_extensions() -> Any:
    """megatron-core's Transformer Engine pieces. Importing them imports Transformer Engine,
    which needs an NVIDIA driver: call this only where `model.layers.te.te_available()` holds."""
    from megatron.core.extensions.transformer_engine import (
        TEColumnParallelLinear,
        TEDotProductAttention,
        TERowParallelLinear,
    )
    from megatron.core.fp8_utils import get_fp8_context
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

    return SimpleNamespace(
        TEColumnParallelLinear=TEColumnParallelLinear,
        TEDotProductAttention=TEDotProductAttention,
        TERowParallelLinear=TERowParallelLinear,
        get_fp8_context=get_fp8_context,
        get_gpt_layer_with_transformer_engine_spec=get_gpt_layer_with_transformer_engine_spec,
    )

"""Model arguments (`LlamaArgs`) for checkpoints written by training, which record none.

Export (tools/convert_megatron_to_hf.py --model-args FILE.json) and upscaling need the
architecture; a converted base records it, a tiny base pre-trained by our own trainer does not.
Both directions are offered, so the recipe names the architecture in one place:

    training flags  --from_train_flags-->  LlamaArgs  --train_flags-->  training flags
    converted checkpoint (model_args)  --from_checkpoint-->  LlamaArgs
"""

from __future__ import annotations

from collections.abc import Sequence

from megatron_scale.convert.megatron_io import MegatronReader
from megatron_scale.convert.model_args import LlamaArgs


def from_train_flags(argv: Sequence[str]) -> LlamaArgs:
    """The architecture that `python -m megatron_scale.train ARGV` builds (vocabulary padded as
    the entry pads it)."""
    from megatron_scale.training.arguments import apply_defaults, build_parser, resolve_vocab
    from megatron_scale.training.model_args import from_flags

    parser = build_parser()
    for action in parser._actions:  # only the architecture is needed: no data, iterations or LR
        action.required = False
    args, _ = parser.parse_known_args(list(argv))
    apply_defaults(args)
    resolve_vocab(args)
    return from_flags(args, args.num_layers)


def from_checkpoint(directory: str) -> LlamaArgs:
    """The model arguments a converted (or upscaled) checkpoint records."""
    return MegatronReader(directory).model_args()


def train_flags(a: LlamaArgs) -> list[str]:
    """The training entry's architecture flags for `a`."""
    flags = [
        "--num-layers", a.num_layers, "--hidden-size", a.hidden_size,
        "--num-attention-heads", a.num_attention_heads, "--num-query-groups", a.num_query_groups,
        "--ffn-hidden-size", a.ffn_hidden_size, "--kv-channels", a.kv_channels,
        "--vocab-size", a.vocab_size, "--max-position-embeddings", a.max_position_embeddings,
        "--rotary-base", int(a.rotary_base), "--norm-epsilon", a.norm_epsilon,
    ]
    if a.rope_scaling:
        flags += ["--use-rope-scaling", "--rope-scaling-factor", a.rope_scaling_factor]
    if a.untie_embeddings_and_output_weights:
        flags.append("--untie-embeddings-and-output-weights")
    return [str(f) for f in flags]

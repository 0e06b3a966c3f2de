"""checkpoint/layout.py: the layout a training checkpoint was saved at, and what a resume at another
layout may do (the resumes themselves: tests/training/test_reshard.py)."""

from __future__ import annotations

import pytest


def test_old_dp_reshardable_state_resumes_only_at_its_grid() -> None:
    """A checkpoint from before the layout record: its layout read off the tensor index (keys as
    the previous release wrote them at DP=2), then resumable at its TP x PP only."""
    from megatron_scale.checkpoint.layout import DP_RESHARDABLE, check_resume, indexed_layout, run_layout

    keys = ["embedding.word_embeddings.weight", "rng_state/shard_0.0_1.1",
            "optimizer.distributed.dp_group_idx_0.optimizer/shard_0_1",
            "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0.exp_avg"]

    class Index:
        state_dict_metadata = dict.fromkeys(keys)

    saved = indexed_layout(Index(), "old/.metadata")
    assert saved is not None and (saved.tp, saved.pp, saved.dp) == (1, 1, None)
    assert saved.optimizer_format == DP_RESHARDABLE and not saved.recorded
    # the same grid loads as it is (megatron-core reshards dp_reshardable over DP itself)
    assert check_resume(saved, run_layout(1, 1, 1, True), "--load old") is None
    with pytest.raises(ValueError, match=r"dp_reshardable format .* saved at, .* cannot be resharded to TP=2 PP=1: "
                                         r"resume it with --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"):
        check_resume(saved, run_layout(2, 1, 1, True), "--load old")
    with pytest.raises(ValueError, match="only --use-distributed-optimizer reads"):
        check_resume(saved, run_layout(1, 1, 1, False), "--load old")
    plain = indexed_layout(type("I", (), {"state_dict_metadata": dict.fromkeys(
        ["rng_state/shard_1.0_2.1", "optimizer.state.exp_avg.decoder.final_layernorm.weight"])})(), "old/.metadata")
    assert plain is not None and (plain.tp, plain.pp, plain.optimizer_format) == (1, 2, "model_space")

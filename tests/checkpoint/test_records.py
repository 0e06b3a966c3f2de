"""checkpoint/records.py: what a checkpoint records beside its tensors, read under one policy.
(The records of real checkpoints, and their refusals, are tested with them: tests/checkpoint/test_io.py,
tests/training/test_reshard.py; the methods' entries: tests/methods/test_record.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest


def test_one_record_policy(tmp_path: Path) -> None:
    """records.read_records: a missing directory and a legacy pickled common.pt are refused by
    name; a directory that is no torch_dist checkpoint is refused, or None where the caller asks."""
    from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords, read_records
    from megatron_scale.methods import Full

    with pytest.raises(CheckpointError, match=r"nope does not exist"):
        read_records(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(CheckpointError, match=r"plain: not a megatron-core torch_dist checkpoint"):
        read_records(tmp_path / "plain")
    assert read_records(tmp_path / "plain", required=False) is None
    nothing = CheckpointRecords(directory=tmp_path / "plain", model_args=None, train_state=None, layout=None,
                                digest=None, scale=None)
    Full().check_record(nothing, tmp_path / "plain")  # nothing recorded: nothing to check
    with pytest.raises(CheckpointError, match=r"plain: not a megatron-core torch_dist checkpoint"):
        _ = read_records(tmp_path / "plain").scale
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "common.pt").write_bytes(b"not a pickle")
    for required in (True, False):
        with pytest.raises(CheckpointError, match=r"legacy: legacy checkpoint with a pickled common.pt"):
            read_records(tmp_path / "legacy", required=required)

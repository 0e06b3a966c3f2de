"""bio/protocol.py's stage files record the float path they were made on (the host's kernels,
torch, threads) beside their settings, and a stage read back from another float path says so
without refusing it: the 2026-12-03 controls' pre-training differed from v2's because of the host's
instruction set, which nothing recorded (results/2026-12-01-biography-controls/notes.md)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from megatron_scale.bio.protocol import float_path, stage
from megatron_scale.bio.settings import Settings, stage_key


def test_a_stage_records_its_float_path_and_a_stage_from_another_one_is_read_with_a_note(tmp_path: Path) -> None:
    path, key, said = str(tmp_path / "pretrain.json"), stage_key(Settings()), []
    result = stage(path, key, lambda: {"loss": [1.0]}, None, said.append)
    doc = json.loads(Path(path).read_text())
    assert result == {"loss": [1.0]} and doc["float_path"] == float_path()
    assert doc["float_path"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert stage(path, key, lambda: {"loss": [2.0]}, None, said.append) == {"loss": [1.0]}
    assert not any("note:" in s for s in said), said  # the same machine: no note
    doc["float_path"]["cpu_capability"] = "NOT_THIS_ONE"
    Path(path).write_text(json.dumps(doc))
    assert stage(path, key, lambda: {"loss": [2.0]}, None, said.append) == {"loss": [1.0]}  # read, not rerun
    assert any("made on NOT_THIS_ONE kernels" in s for s in said), said

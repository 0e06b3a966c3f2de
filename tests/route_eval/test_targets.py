"""route_eval/targets.py and tools/bits_by_target.py: a records file's loss split by target, a
token of the script's output rows or any other, on hand-made records whose shares are worked out by
hand (results/2026-11-29-smollm2-rows-384/runs/bits_by_target.sh)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from megatron_scale.route_eval import stored, targets
from tests._unit_vocab import pieces, write_tokenizer

# tokens 0-3 of a 6-token vocabulary are the script's rows; labels: three in the rows, one outside
ROWS = torch.tensor([True, True, True, True, False, False])
SET = {"loss_p": torch.tensor([2.0, 2.0, 2.0, 2.0]), "loss_a": torch.tensor([1.0, 1.0, 1.0, 3.0]),
       "labels": torch.tensor([0, 1, 3, 5])}


def test_the_loss_splits_into_the_rows_and_the_rest() -> None:
    got = targets.loss_by_target({"ko": SET, "cal/ko": SET}, ROWS)  # calibration sets are skipped
    assert [(r["set"], r["target"], r["tokens"]) for r in got] == [("ko", "Hangul rows", 3), ("ko", "other", 1),
                                                                   ("ko", "all", 4)]
    rows, other, every = got
    # the base's loss: 6 of 8 nats on the rows' targets, 2 on the other; the rows lose half of theirs
    assert rows["share_of_base_loss"] == 0.75 and rows["gone"] == 0.5 and rows["share_of_all_gone"] == 0.375
    assert other["gone"] == -0.5 and other["share_of_all_gone"] == -0.125
    assert every["gone"] == 0.25
    assert targets.table(got).splitlines()[2:] == ["| ko | Hangul rows | 3 | 0.750 | +0.500 | +0.3750 |",
                                                   "| ko | other | 1 | 0.250 | -0.500 | -0.1250 |",
                                                   "| ko | all | 4 | 1.000 | +0.2500 | |"]


def test_the_tool_reads_a_records_file_and_its_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pieces()
    hangul = table.index("한".encode()[:1])  # a lead byte: a Hangul row; id 0 (special) is not
    ascii_a = table.index(b"a")
    rec = {"loss_p": torch.tensor([2.0, 2.0]), "loss_a": torch.tensor([1.0, 2.0]),
           "labels": torch.tensor([hangul, ascii_a])}
    stored.save(tmp_path / "r.safetensors", {"ko": rec}, {"load": "ckpt/iter_384"})
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import bits_by_target

    folder = write_tokenizer(str(tmp_path / "tok"), table)
    assert bits_by_target.main([str(tmp_path / "r.safetensors"), folder, "--out", str(tmp_path / "t.md")]) == 0
    err = capsys.readouterr().err
    assert err == (tmp_path / "t.md").read_text()
    assert err.splitlines()[0] == "records ckpt/iter_384" and err.splitlines()[1] == ""
    assert "| ko | Hangul rows | 1 | 0.500 | +0.500 | +0.2500 |" in err.splitlines()

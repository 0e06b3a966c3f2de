"""tools/bench_columns.py: the GPU session's bench files joined into one table. Checked on the
committed H200 files (results/2026-11-28-h200-te): each cell recomputes from its file, and files of
another card or shape are refused, naming the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_columns as bc  # noqa: E402

RUN = ROOT / "results" / "2026-11-28-h200-te"


def test_each_cell_recomputes_from_its_file() -> None:
    sdpa = bc.load("sdpa", RUN / "bench_local_sdpa.json")
    raw = json.loads((RUN / "bench_local_sdpa.json").read_text())
    by = {r["method"]: r for r in raw["results"]}
    x = bc.cells(sdpa, "preserve")
    assert x["tokens_s"] == pytest.approx(4096 / by["preserve"]["step_s"])
    assert x["vs_full"] == pytest.approx(by["full_ft"]["step_s"] / by["preserve"]["step_s"])
    # MFU: the FLOP model over the file's own --peak-tflops (989); full fine-tuning at the 1B shape
    # does about 6 * 1.5e9 * 4096 FLOPs plus attention per step, so its MFU is near 0.36 at 0.105 s
    assert 0.3 < bc.cells(sdpa, "full_ft")["mfu"] < 0.4
    table = bc.table([sdpa, bc.load("te", RUN / "bench_te_bf16.json")])
    assert table.splitlines()[0].count("|") == 4 and "| preserve | 0.109 / 37715 / 0.350 / 17.0 / 0.963x |" in table


def test_other_shapes_and_unfinished_runs_are_refused_naming_the_file(tmp_path: Path) -> None:
    d = json.loads((RUN / "bench_te_bf16.json").read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**d, "args": {**d["args"], "seq": 2048}}))
    with pytest.raises(SystemExit, match=r"other\.json: --seq 2048, not 4096"):
        bc.same_run([bc.load("a", RUN / "bench_te_bf16.json"), bc.load("b", other)])
    half = tmp_path / "half.json"
    half.write_text(json.dumps({**d, "status": "running"}))
    with pytest.raises(SystemExit, match=r"half\.json: the run did not finish"):
        bc.load("c", half)
    with pytest.raises(SystemExit, match=r"missing\.json: not a readable"):
        bc.load("d", tmp_path / "missing.json")

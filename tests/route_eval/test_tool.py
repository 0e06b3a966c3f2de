"""tools/route_sweep.py end to end on a tiny SCALE-Route checkpoint (converted from a tiny HF
Llama and upscaled), swept at TP=2 over an old-domain and a new-domain indexed dataset: the JSON
and plot are written for every statistic; at upscaling z_a == z_p, so both heads give the same
perplexity and the cosine is 1 on every token (AUC exactly 0.5); the calibrated tau (chosen on
held-out windows of the same sets, --calibration-skip) keeps its target share of old tokens, is
written as the default of a new checkpoint, and the HF export of that checkpoint carries it. Bad
input: one error line naming the flag.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.convert import _hf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))


def _dataset(prefix: Path, seed: int, low: int, high: int) -> str:
    from megatron_scale import _mcore as mc

    g = np.random.default_rng(seed)
    builder = mc.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
    for _ in range(12):
        builder.add_document(torch.tensor(g.integers(low, high, 40), dtype=torch.int32), [40])
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import route_sweep

    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint

    root = tmp_path_factory.mktemp("route_sweep")
    _hf.make_hf(root / "hf", tied=True)
    convert_hf_to_megatron(root / "hf", root / "mg", tp=1, progress=False)
    upscale_checkpoint(root / "mg", root / "route", ScaleConfig(variant="route", heads_up=4), tp=1)
    from megatron_scale.data.tokenizer import train_byte_bpe

    tok = train_byte_bpe(["some English words to learn from"] * 10, 300, str(root / "tok"))
    old = _dataset(root / "old", 0, 0, _hf.VOCAB // 2)
    new = _dataset(root / "new", 1, _hf.VOCAB // 2, _hf.VOCAB)
    argv = ["--load", str(root / "route"), "--old-data", f"en={old}", "--new-data", f"ko={new}", "--seq-length", "16",
            "--samples", "6", "--batch-size", "3", "--tensor-model-parallel-size", "2", "--keep-old", "0.9",
            "--calibrate-with", "max-prob", "--save", str(root / "calibrated"), "--out", str(root / "out"),
            "--calibration-old-data", old, "--calibration-new-data", new, "--calibration-skip", "6",
            "--route-units", "token", "char", "word", "--tokenizer", tok]
    rc = route_sweep.main(argv)
    return {"root": root, "rc": rc, "argv": argv, "old": old, "new": new}


@pytest.mark.dist
def test_sweep_writes_every_statistic(work: dict) -> None:
    assert work["rc"] == 0
    res = json.loads((work["root"] / "out" / "sweep.json").read_text())
    assert (work["root"] / "out" / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert res["tokens"] == {"en": 6 * 16, "ko": 6 * 16}
    assert sorted(res["statistics"]) == sorted(["cosine", "centered-cosine", "max-prob", "certainty"])
    for name in ("en", "ko"):  # at upscaling the two heads are the same function
        assert res["heads"][name]["z_p"] == res["heads"][name]["z_a"] > 1.0
    assert res["statistics"]["cosine"]["auc"] == 0.5  # cos == 1 everywhere: no separation at all
    for stat, r in res["statistics"].items():
        first, last = (1.0, 0.0) if r["direction"] == "above" else (0.0, 1.0)
        assert r["points"][0]["en_kept"] == first and r["points"][-1]["ko_kept"] == last, stat
        assert r["direction"] == r["calibration"]["direction"] in ("above", "below")
        assert r["points"][0 if r["direction"] == "above" else -1]["en"] == pytest.approx(res["heads"]["en"]["z_p"])
        assert 0.0 <= r["auc"] <= 1.0


@pytest.mark.dist
def test_sweep_per_character_and_word_beside_per_token(work: dict) -> None:
    """--route-units token char word: the sweep's own numbers per token, and per character and per
    word from the same records (every statistic, its direction and AUC), labelled."""
    res = json.loads((work["root"] / "out" / "sweep.json").read_text())
    assert res["unit"] == "token" and sorted(res["by_unit"]) == ["char", "word"]
    for unit, stats in res["by_unit"].items():
        assert sorted(stats) == sorted(res["statistics"]), unit
        for r in stats.values():
            assert r["direction"] in ("above", "below") and 0.0 <= r["auc_by_direction"][r["direction"]] <= 1.0
            assert r["calibration"]["old_kept"] >= 0.9


@pytest.mark.dist
def test_calibrated_tau_is_recorded_and_exported(work: dict) -> None:
    from megatron_scale.checkpoint import read_records
    from megatron_scale.convert import convert_megatron_to_hf

    res = json.loads((work["root"] / "out" / "sweep.json").read_text())
    cal = res["statistics"]["max-prob"]["calibration"]
    # calibrated on windows 6..11 of the same sets (held out from the evaluated 0..5)
    assert cal["old_kept"] >= 0.9 and cal["reachable"] and cal["held_out"]
    assert res["settings"]["calibration_skip"] == 6 and res["tokens"] == {"en": 6 * 16, "ko": 6 * 16}
    dims = read_records(work["root"] / "calibrated").scale["dims"]  # type: ignore[index]
    assert (dims["router_tau"], dims["router_statistic"], dims["router_direction"]) == (cal["tau"], "max-prob", cal["direction"])
    convert_megatron_to_hf(work["root"] / "calibrated", work["root"] / "hf-calibrated", progress=False)
    cfg = json.loads((work["root"] / "hf-calibrated" / "config.json").read_text())
    assert (cfg["scale_router_tau"], cfg["scale_router_statistic"], cfg["scale_router_direction"]) == (
        cal["tau"], "max-prob", cal["direction"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--old-data": "nameless"}, "--old-data: expected NAME=PREFIX"),
        ({"--keep-old": "1.5", "--save": None}, "--keep-old: must be a share in (0, 1]"),
        ({"--keep-old": None, "--save": "x"}, "--save writes the calibrated tau: it needs --keep-old"),
        ({"--samples": "1000", "--save": None}, "--old-data"),
        ({"--calibrate-with": "cosine", "--statistics": "max-prob"}, "--calibrate-with 'cosine' is not among"),
        ({"--calibration-skip": "3"}, "--calibration-old-data is --old-data's set: its windows overlap"),
        ({"--calibration-skip": "40", "--save": None}, "--calibration-old-data"),
        ({"--calibration-skip": "-1"}, "--calibration-skip: must be at least 0"),
        ({"--tokenizer": None}, "--route-units char/word need --tokenizer"),
        ({"--route-units": "char"}, "--save: a model routing per char decides by the unit's first token"),
    ],
)
def test_bad_input_names_the_flag(work: dict, change: dict, message: str, capsys: pytest.CaptureFixture) -> None:
    import route_sweep

    argv = list(work["argv"])
    for flag, value in change.items():
        if flag in argv:  # the flag and its values (up to the next flag)
            i = j = argv.index(flag)
            while j + 1 < len(argv) and not argv[j + 1].startswith("--"):
                j += 1
            del argv[i : j + 1]
        if value is not None:
            argv += [flag, value]
    try:
        rc = route_sweep.main(argv)
    except SystemExit as e:  # argparse
        rc = e.code
    assert rc == 2
    assert message in capsys.readouterr().err


def test_windows_skip(work: dict) -> None:
    """Windows after `skip` are the same windows as counted from the start; too few tokens name
    the flag and the skipped windows."""
    from megatron_scale.data.windows import windows

    assert torch.equal(windows(work["old"], 16, 3, skip=2), windows(work["old"], 16, 5)[2:])
    with pytest.raises(ValueError, match=r"--calibration-new-data .*after the 28 skipped windows: 493 needed"):
        windows(work["new"], 16, 1, skip=28, flag="--calibration-new-data")

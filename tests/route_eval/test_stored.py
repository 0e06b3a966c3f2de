"""Route records kept in a file (route_eval/stored.py) and SCALE-Route's frontier rows computed from
them (reports/route_frontier.py), on hand-made records whose scores are worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from megatron_scale.reports.recipe_frontier import Axis
from megatron_scale.reports.route_frontier import ALPHA, PAPER, RANDOM, checkpoint_rows, deployable, oracle, route_runs
from megatron_scale.route_eval import stored
from megatron_scale.route_stats.statistics import STATISTICS

N = 8  # tokens per set


def _set(loss_p: float, loss_a: float, stat: float, alphas: dict[float, float]) -> dict[str, torch.Tensor]:
    rec = {"loss_p": torch.full((N,), loss_p), "loss_a": torch.full((N,), loss_a),
           "correct_p": torch.ones(N, dtype=torch.bool), "correct_a": torch.zeros(N, dtype=torch.bool),
           "labels": torch.arange(N)}
    rec |= {f"stat/{s}": torch.full((N,), stat) for s in STATISTICS}
    for a, loss in alphas.items():
        rec[f"alpha/{a:g}/loss"], rec[f"alpha/{a:g}/correct"] = torch.full((N,), loss), torch.ones(N, dtype=torch.bool)
    return rec


def _records() -> dict[str, dict[str, torch.Tensor]]:
    # English: z_p 2 nats, z_a 3; Korean: z_p 4, z_a 2. Every statistic is high on English (0.9),
    # low on Korean (0.1); the held-out calibration windows say English sits at 0.95.
    return {"en": _set(2.0, 3.0, 0.9, {0.0: 2.0, 0.5: 2.2, 1.0: 3.0}),
            "ko": _set(4.0, 2.0, 0.1, {0.0: 4.0, 0.5: 2.8, 1.0: 2.0}),
            "cal/en": _set(2.0, 3.0, 0.95, {}), "cal/ko": _set(4.0, 2.0, 0.1, {})}


def _flat(points) -> list[float]:  # type: ignore[no-untyped-def]
    return [v for p in points for v in p]


META = {"load": "ckpt", "seq_length": N, "tokenizer": None}


def test_records_file_round_trips(tmp_path: Path) -> None:
    rec = _records()
    stored.save(tmp_path / "r.safetensors", rec, {"load": "x", "seq_length": N})
    back, meta = stored.load(tmp_path / "r.safetensors")
    assert meta == {"load": "x", "seq_length": N} and sorted(back) == sorted(rec)
    for name in rec:
        assert sorted(back[name]) == sorted(rec[name])
        assert all(torch.equal(back[name][k], rec[name][k]) and back[name][k].dtype == rec[name][k].dtype
                   for k in rec[name]), name
    with pytest.raises(FileNotFoundError, match="no such file"):
        stored.load(tmp_path / "none.safetensors")


def test_rows_of_one_checkpoint_are_worked_out_by_hand() -> None:
    rows = checkpoint_rows(_records(), META, Axis.of("en", "ko"), units=("token",))
    # the paper's router (cosine >= 0.5): English on z_p (retention 1), Korean on z_a (learning 1 - 2/4)
    assert rows["points"][PAPER] == pytest.approx((0.5, 1.0))
    # deployable: tau from the held-out windows (0.95, direction above), so the evaluated English
    # (0.9) goes to z_a too: retention 2/3, learning 0.5
    assert rows["points"][deployable("cosine", "token")] == pytest.approx((0.5, 2.0 / 3.0))
    (router,) = [r for r in rows["detail"]["routers"] if r["statistic"] == "cosine"]
    assert (router["direction"], router["tau"], router["unit"]) == ("above", pytest.approx(0.95), "token")
    # the oracle sweeps every tau: its best point keeps English and learns 0.5
    assert max(rows["curves"][oracle("cosine", "token")]) == pytest.approx((0.5, 1.0))
    # random mixing at rate f: English 2 + f, Korean 4 - 2 f -> (f / 2, 2 / (2 + f))
    for (learning, retention), f in zip(rows["curves"][RANDOM], [0.05 * i for i in range(21)], strict=True):
        assert (learning, retention) == pytest.approx((f / 2, 2 / (2 + f)))
    # global alpha: the records' own mixtures
    assert _flat(rows["curves"][ALPHA]) == pytest.approx([0.0, 1.0, 0.3, 2 / 2.2, 0.5, 2 / 3])
    assert rows["detail"]["heads"]["ko"] == pytest.approx({"z_p": math.exp(4.0), "z_a": math.exp(2.0)})


def test_route_runs_follow_the_checkpoints(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "scale-preserve-seed7"
    (run / "route_records").mkdir(parents=True)
    early = _records()
    early["ko"]["loss_a"] = torch.full((N,), 3.0)  # iteration 2: z_a learnt less Korean
    stored.save(run / "route_records" / "iter_0000002.safetensors", early, META)
    stored.save(run / "route_records" / "iter_0000008.safetensors", _records(), META)
    runs, detail = route_runs(run, 1e-3, 7, Axis.of("en", "ko"), units=("token",))
    (paper,) = [r for r in runs if r.method == PAPER]
    assert (paper.lr, paper.seed) == (1e-3, 7) and _flat(paper.curve) == pytest.approx([0.0, 1.0, 0.25, 1.0, 0.5, 1.0])
    assert [d["iteration"] for d in detail] == [2, 8]
    assert sum(r.method == RANDOM for r in runs) == 2  # one control curve per checkpoint
    with pytest.raises(ValueError, match="no set"):
        checkpoint_rows(_records(), META, Axis.of(("en", "en_modern"), "ko"), units=("token",))
    # a checkpoint recorded for the Preserve curve alone (no calibration windows) gives no Route point
    losses_only = {k: v for k, v in _records().items() if not k.startswith("cal/")}
    stored.save(run / "route_records" / "iter_0000004.safetensors", losses_only, META)
    runs, detail = route_runs(run, 1e-3, 7, Axis.of("en", "ko"), units=("token",))
    assert [d["iteration"] for d in detail] == [2, 8]
    (paper,) = [r for r in runs if r.method == PAPER]
    assert _flat(paper.curve) == pytest.approx([0.0, 1.0, 0.25, 1.0, 0.5, 1.0])
    for f in (run / "route_records").glob("iter_000000[28].safetensors"):
        f.unlink()
    with pytest.raises(ValueError, match="no route records with calibration windows"):
        route_runs(run, 1e-3, 7, Axis.of("en", "ko"), units=("token",))

"""Whole-iteration CUDA graphs in the training entry (--cuda-graph-impl full_iteration; marked gpu,
the TE rows also te; skipped with the reason elsewhere; tests/training/test_kernels.py checks the
wiring on CPU with a stand-in schedule). One spawned rank: the real entry (training/loop.py train)
four steps eagerly and four steps with the schedule captured after one warm-up step, full
fine-tuning and Preserve, on the local path and on Transformer Engine (Preserve's TE linears in
both compositions): the graphed losses equal the eager ones, and megatron-core's wrapper did
capture (its training graph exists after the run)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from megatron_scale.testing.runs import ARCH, make_dataset
from tests._dist import run_ranks
from tests.conftest import requires_gpus, requires_te

RUNS = {
    "full/local": ("full", []),
    "preserve/local": ("scale-preserve", []),
    "full/te": ("full", ["--transformer-impl", "transformer_engine"]),
    "preserve/te": ("scale-preserve", ["--transformer-impl", "transformer_engine"]),
    "preserve/te_fused": ("scale-preserve", ["--transformer-impl", "transformer_engine", "--scale-te-linear", "fused"]),
}


def _losses(method: str, extra: list[str], data: str, graphs: bool, root: Path) -> tuple[list[float], bool]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import destroy_distributed
    from megatron_scale.training.config import parse
    from megatron_scale.training.loop import train

    metrics = root / f"{method}_{len(extra)}_{graphs}.jsonl"
    argv = [*ARCH, "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "4", "--lr", "1e-3",
            "--device", "cuda", "--bf16", "--method", method, "--train-iters", "4", "--data-path", data,
            "--split", "100,0,0", "--metrics-file", str(metrics), *extra]
    if graphs:
        argv += ["--cuda-graph-impl", "full_iteration", "--cuda-graph-warmup-steps", "1"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            train(parse(argv))
        captured = mc.FullCudaGraphWrapper.cuda_graph["training"] is not None
    finally:
        destroy_distributed()
    recs = [r for r in map(json.loads, metrics.read_text().splitlines()) if r["kind"] == "train"]
    return [r["lm_loss"] for r in recs], captured


def _body(rank: int, world: int, names: list[str]) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp())
    data = make_dataset(root / "data", seed=0, docs=200)
    out = {}
    for name in names:
        method, extra = RUNS[name]
        eager, _ = _losses(method, extra, data, False, root)
        graphed, captured = _losses(method, extra, data, True, root)
        out[name] = {"eager": eager, "graphed": graphed, "captured": captured}
    return out


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    from megatron_scale.model.layers.te import te_available

    names = [n for n in RUNS if "/te" not in n or te_available()]
    return run_ranks(_body, 1, names)[0]


def _check(r: dict[str, Any]) -> None:
    assert r["captured"], r
    assert len(r["eager"]) == len(r["graphed"]) == 4, r
    assert r["graphed"] == pytest.approx(r["eager"], rel=1e-5), r


@requires_gpus(1)
@pytest.mark.parametrize("name", ["full/local", "preserve/local"])
def test_graphed_losses_equal_eager_on_the_local_path(results: dict, name: str) -> None:
    _check(results[name])


@requires_gpus(1)
@requires_te
@pytest.mark.parametrize("name", ["full/te", "preserve/te", "preserve/te_fused"])
def test_graphed_losses_equal_eager_on_te(results: dict, name: str) -> None:
    _check(results[name])

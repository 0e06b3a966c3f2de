"""megatron_scale.selfcheck, run where the tests run: versions printed, what it skipped and why,
and the exit status each flag promises (no CUDA device needed; with one, the CUDA step runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from megatron_scale import selfcheck
from megatron_scale._mcore import MCORE_VERSION
from megatron_scale.model.layers.te import te_available

NO_CUDA = not torch.cuda.is_available()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = selfcheck.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_the_module_runs_and_prints_versions() -> None:
    r = subprocess.run([sys.executable, "-m", "megatron_scale.selfcheck"], capture_output=True, text=True,
                       check=False, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("ok    torch ") and torch.__version__ in line for line in lines), lines
    assert any(line.startswith("ok    megatron-core ") and MCORE_VERSION in line for line in lines), lines
    assert lines[-1] == "selfcheck: ok"


@pytest.mark.skipif(not NO_CUDA, reason="checks the report without a CUDA device")
def test_without_cuda_the_step_is_skipped_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _run(capsys)
    step = [line for line in lines if "cuda step" in line]
    assert code == 0 and len(step) == 1 and step[0].startswith("skip ") and "no CUDA device: " in step[0]
    assert len(step[0].split("no CUDA device: ", 1)[1]) > 10, "the reason is said"
    code, lines = _run(capsys, "--require-gpu")
    assert code == 1 and any(line.startswith("fail  cuda step") for line in lines)
    assert lines[-1] == "selfcheck: FAILED: cuda step"


def test_expect_torch_mismatch_fails_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _run(capsys, "--expect-torch", "2.10.0a0+b4e4ee81d3")
    named = [line for line in lines[:-1] if "--expect-torch" in line]  # the last line is the summary
    assert code == 1 and len(named) == 1 and named[0].startswith("fail ")
    assert torch.__version__ in named[0] and "2.10.0a0+b4e4ee81d3" in named[0]
    assert lines[-1] == "selfcheck: FAILED: --expect-torch"


def test_expect_torch_match_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _run(capsys, "--expect-torch", torch.__version__)
    assert code == 0 and any(line.startswith("ok    --expect-torch") for line in lines)


def test_empty_expect_torch_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        selfcheck.main(["--expect-torch", " "])
    assert e.value.code == 2 and "--expect-torch: empty version" in capsys.readouterr().err


@pytest.mark.skipif(te_available(), reason="checks a machine without Transformer Engine")
def test_image_mode_requires_transformer_engine_and_apex(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _run(capsys)
    assert code == 0 and any(line.startswith("skip  transformer_engine") for line in lines)
    code, lines = _run(capsys, "--image")
    assert code == 1 and any(line.startswith("fail  transformer_engine") and "not installed" in line
                             for line in lines)


def test_torch_versions_match_the_release_notes_form() -> None:
    assert selfcheck.torch_matches("2.10.0a0+b4e4ee81d3.nv25.12", "2.10.0a0+b4e4ee81d3")
    assert selfcheck.torch_matches("2.10.0a0+b4e4ee81d3", "2.10.0a0+b4e4ee81d3")
    assert not selfcheck.torch_matches("2.10.0a0+b4e4ee81d3x", "2.10.0a0+b4e4ee81d3")
    assert not selfcheck.torch_matches("2.13.0+cu130", "2.13.0"), "a different build is not the image's"
    assert not selfcheck.torch_matches("2.13.0", "2.10.0a0+b4e4ee81d3")


def test_a_driver_less_import_failure_is_a_skip_not_a_failure() -> None:
    """docker build has no libcuda.so.1: an installed package whose import fails there is skipped with
    that reason; with a driver present the same failure is a failure."""
    check, imported = selfcheck.check_modules("x", ("megatron_scale.no_such_module",), ("megatron-core",),
                                              True, "no NVIDIA driver library here")
    assert not imported and check.status == "skip" and "no NVIDIA driver library here" in check.detail
    check, _ = selfcheck.check_modules("x", ("megatron_scale.no_such_module",), ("megatron-core",), True, None)
    assert check.status == "fail" and "ModuleNotFoundError" in check.detail

"""A checkpoint that records its model supplies it: runs need only their own flags.

A tiny Hugging Face Llama (tests/convert/_hf.py: GQA, Llama 3.x RoPE scaling, rope theta 500000,
none of the training entry's defaults) is converted and upscaled with non-default --scale-*
sizes. Then, with no architecture and no --scale-* flag:
- the entry trains the converted base (--method full, TP=1) and the upscaled one
  (--method scale-preserve, TP=2);
- every flag that disagrees with the record is refused by `check_args` (no process group, no
  weights read), naming the flag, in one line; through torchrun the entry prints that one line
  and exits 2.
Resuming and starting from a trained checkpoint with only run flags is covered by every --load
run of tests/training/test_train_entry.py (megatron_scale/testing/runs.py drops the model flags there).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.convert import _hf
from megatron_scale.testing.runs import RUN, command, losses, make_dataset, train

pytestmark = pytest.mark.dist
UPSCALED = {"hidden_up": 8, "heads_up": 4, "groups_up": 2, "ffn_up": 16}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint

    root = tmp_path_factory.mktemp("from_load")
    _hf.make_hf(root / "hf", tied=True)
    convert_hf_to_megatron(root / "hf", root / "base", tp=1, progress=False)
    upscale_checkpoint(root / "base", root / "up", ScaleConfig(variant="preserve", seed=5, **UPSCALED), tp=2)
    return {"root": root, "base": str(root / "base"), "up": str(root / "up"), "data": make_dataset(root / "ko", seed=1)}


def test_trains_from_converted_and_upscaled_with_run_flags_only(ckpts: dict) -> None:
    root, data = ckpts["root"], ckpts["data"]
    full = losses(train(1, root / "full.jsonl", "--method", "full", "--load", ckpts["base"], "--data-path", data,
                        "--train-iters", "3"))
    scale = losses(train(2, root / "scale.jsonl", "--method", "scale-preserve", "--load", ckpts["up"],
                         "--data-path", data, "--train-iters", "3", "--tensor-model-parallel-size", "2"))
    assert sorted(full) == sorted(scale) == [1, 2, 3]
    # Upscaled for Preserve, the model computes the base function at first: on the same first
    # batch both start at the same loss, which a wrong inherited setting (RoPE, norm) would move.
    assert scale[1] == pytest.approx(full[1], abs=1e-4)


def _check(ckpt: str, data: str, *extra: str, world: int = 1) -> Any:
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import plan

    return plan(parse([*RUN, "--train-iters", "4", "--data-path", data, "--load", ckpt, *extra]), world)


def test_flags_come_from_the_record(ckpts: dict) -> None:
    p = _check(ckpts["up"], ckpts["data"], "--method", "scale-preserve", "--tensor-model-parallel-size", "2", world=2)
    a, scale = p.architecture, p.method.dims  # the recorded geometry itself
    assert (a.num_layers, a.hidden_size, a.num_attention_heads, a.num_query_groups) == (4, 64, 8, 4)
    assert (a.rotary_base, a.rope_scaling, a.rope_scaling_factor) == (500000.0, True, 8.0)
    assert a.max_position_embeddings == 131072 and a.vocab_size == _hf.VOCAB
    assert {k: getattr(scale, k) for k in UPSCALED} == UPSCALED and scale.seed == 5


@pytest.mark.parametrize(
    ("which", "extra", "flag"),
    [
        ("base", ("--rotary-base", "10000"), "--rotary-base"),
        ("base", ("--num-layers", "3"), "--num-layers"),
        ("base", ("--norm-epsilon", "1e-6"), "--norm-epsilon"),
        ("base", ("--untie-embeddings-and-output-weights",), "--untie-embeddings-and-output-weights"),
        ("base", ("--seq-length", "200000"), "--seq-length 200000 exceeds the model's --max-position-embeddings"),
        ("up", ("--method", "scale-preserve", "--scale-ffn-up", "32"), "--scale-ffn-up"),
        ("up", ("--method", "scale-preserve", "--scale-seed", "6"), "--scale-seed"),
        ("up", ("--method", "scale-adapt"), "--method"),
        ("up", ("--method", "full"), "--method scale-preserve"),
        ("up", ("--method", "scale-preserve", "--hidden-size", "32"), "--hidden-size"),
    ],
)
def test_a_flag_that_disagrees_is_refused_by_name(ckpts: dict, which: str, extra: tuple, flag: str) -> None:
    from megatron_scale.training.plan import FlagError

    with pytest.raises(FlagError) as e:
        _check(ckpts[which], ckpts["data"], *extra)
    assert flag in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_without_a_record_the_sizes_are_needed(ckpts: dict) -> None:
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import FlagError, plan

    config = parse([*RUN, "--train-iters", "4", "--data-path", ckpts["data"], "--vocab-size", "96"])
    with pytest.raises(FlagError, match="--num-layers, --hidden-size, --num-attention-heads, --ffn-hidden-size needed"):
        plan(config, 1)


def _one_error_line(out: subprocess.CompletedProcess) -> None:
    assert out.returncode != 0
    ours = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(ours) == 1 and "--rotary-base" in ours[0] and "500000" in ours[0], out.stderr[-3000:]
    # no traceback of ours (torchrun adds its own ChildFailedError report for the exit status)
    assert 'megatron_scale/' not in out.stderr and "FlagError" not in out.stderr, out.stderr[-3000:]
    assert "exitcode  : 2" in out.stderr, out.stderr[-3000:]


BAD = ("--method", "full", "--train-iters", "2", "--rotary-base", "10000")


def test_the_entry_says_it_in_one_line(ckpts: dict) -> None:
    """Through torchrun: exit status 2 and one `error:` line, no traceback of ours."""
    out = subprocess.run(command(2, *BAD, "--load", ckpts["base"], "--data-path", ckpts["data"]),
                         capture_output=True, text=True, timeout=300)
    _one_error_line(out)


def test_the_line_is_said_when_another_rank_than_0_fails_first(ckpts: dict) -> None:
    """Rank 0 is held back 60 s before it starts: rank 1 finds the bad flag first and exits, and
    torchrun ends rank 0 in its sleep (the hold only bounds rank 1's start; 20 s was too short for
    it in a loaded suite run, 2026-11-28, where rank 0 woke and failed first). The line must come
    from rank 1 (it came only from rank 0)."""
    cmd = command(2, *BAD, "--load", ckpts["base"], "--data-path", ckpts["data"])
    entry = cmd.index("-m", cmd.index("--nproc-per-node=2"))
    cmd[entry:entry + 2] = [str(Path(__file__).parent / "_late_rank.py"), "0", "60"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    _one_error_line(out)
    # torchrun's report: rank 1 failed first with status 2, rank 0 was ended by its SIGTERM
    root = out.stderr[out.stderr.index("Root Cause"):]
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)\s*exitcode\s*: 2 ", root), out.stderr[-3000:]
    assert re.search(r"rank\s*: 0 \(local_rank: 0\)\s*exitcode\s*: -15 ", out.stderr), out.stderr[-3000:]


def test_lr_warmup_not_below_iterations_refused_before_loading(ckpts: dict) -> None:
    from megatron_scale.training.plan import FlagError

    with pytest.raises(FlagError, match=r"--lr-warmup-iters 2 must be below --train-iters 2"):
        _check(ckpts["base"], ckpts["data"], "--train-iters", "2")
    with pytest.raises(FlagError, match=r"--lr-warmup-iters 2 must be below --lr-decay-iters 1"):
        _check(ckpts["base"], ckpts["data"], "--lr-decay-iters", "1")

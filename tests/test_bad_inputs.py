"""Bad inputs, one clear error each, before work starts and with nothing written: one case per
input (docs/reliability.md lists them with the command that reproduces each).

Training's cases go through `plan(parse(argv), world)`, the preflight every rank runs before any
process group exists (the entry prints its FlagError as one `error:` line, exit status 2:
tests/training/test_from_load.py runs that through torchrun); conversion's through the
conversion functions. One case runs the real entry under torchrun: an error raised inside the
ranks, after their process groups exist, still reaches the user as one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.convert import _hf
from megatron_scale.testing.runs import RUN, command, make_dataset


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny HF Llama, its conversion (a base checkpoint), an upscaled SCALE checkpoint and two
    datasets; each case damages its own copy."""
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint

    root = tmp_path_factory.mktemp("bad_inputs")
    _hf.make_hf(root / "hf", tied=True)
    convert_hf_to_megatron(root / "hf", root / "base", tp=1, progress=False)
    upscale_checkpoint(root / "base", root / "up", ScaleConfig(variant="preserve", seed=5), tp=1)
    return {"root": root, "hf": root / "hf", "base": root / "base", "up": root / "up",
            "data": make_dataset(root / "data", seed=0), "small": make_dataset(root / "small", seed=1, docs=20)}


def _refused(tmp: Path, *argv: str, world: int = 1) -> str:
    """The FlagError message training's preflight gives `argv` (one line); its --save is never made."""
    from megatron_scale.training.config import parse
    from megatron_scale.training.plan import FlagError, plan

    save = tmp / "run"
    with pytest.raises(FlagError) as e:
        plan(parse([*RUN, "--train-iters", "4", "--save", str(save), *argv]), world)
    message = str(e.value)
    assert "\n" not in message, message
    assert not save.exists()
    return message


def _copy_dataset(src: str, dst: Path, idx_from: str | None = None) -> str:
    shutil.copy(src + ".bin", f"{dst}.bin")
    shutil.copy((idx_from or src) + ".idx", f"{dst}.idx")
    return str(dst)


def _truncate(path: str | Path, by: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - by)


def _tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*"))}


def test_truncated_bin(inputs: dict, tmp_path: Path) -> None:
    data = _copy_dataset(inputs["data"], tmp_path / "ds")
    _truncate(f"{data}.bin", 10)
    message = _refused(tmp_path, "--load", str(inputs["base"]), "--method", "full", "--data-path", data)
    assert message.startswith(f"--data-path: {data}.bin is truncated"), message


def test_truncated_idx(inputs: dict, tmp_path: Path) -> None:
    data = _copy_dataset(inputs["data"], tmp_path / "ds")
    _truncate(f"{data}.idx", 8)
    message = _refused(tmp_path, "--load", str(inputs["base"]), "--method", "full", "--data-path", data)
    assert message.startswith(f"--data-path: {data}.idx is truncated"), message


def test_idx_does_not_match_bin(inputs: dict, tmp_path: Path) -> None:
    data = _copy_dataset(inputs["data"], tmp_path / "ds", idx_from=inputs["small"])
    message = _refused(tmp_path, "--load", str(inputs["base"]), "--method", "full",
                       "--data-path", inputs["data"], "--eval-data-path", f"held={data}")
    assert message.startswith(f"--eval-data-path held: {data}.bin does not match its .idx"), message


def test_checkpoint_missing_a_shard(inputs: dict, tmp_path: Path) -> None:
    from megatron_scale.convert import ConversionError, convert_megatron_to_hf

    ckpt = tmp_path / "ckpt"
    shutil.copytree(inputs["base"], ckpt)
    (ckpt / "__0_0.distcp").unlink()
    message = _refused(tmp_path, "--load", str(ckpt), "--method", "full", "--data-path", inputs["data"])
    assert message.startswith(f"--load: {ckpt}/__0_0.distcp: shard file missing"), message
    with pytest.raises(ConversionError, match=rf"^{ckpt}/__0_0\.distcp: shard file missing"):
        convert_megatron_to_hf(ckpt, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_checkpoint_from_a_newer_megatron_core(inputs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron_scale import _mcore
    from megatron_scale.convert import ConversionError, convert_megatron_to_hf

    # megatron-core's own format record (metadata.json), as a newer megatron-core would write it
    ckpt = tmp_path / "ckpt"
    shutil.copytree(inputs["base"], ckpt)
    (ckpt / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 2}))
    message = _refused(tmp_path, "--load", str(ckpt), "--method", "full", "--data-path", inputs["data"])
    assert message.startswith(f"--load: {ckpt}/metadata.json: torch_dist format version 2, written by a newer "
                              "megatron-core"), message
    with pytest.raises(ConversionError, match="metadata.json: torch_dist format version 2"):
        convert_megatron_to_hf(ckpt, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    # megatron-scale's own record of the writer: 0.19.2 is newer than an installed 0.19.1
    monkeypatch.setattr(_mcore, "MCORE_VERSION", "0.19.1")
    message = _refused(tmp_path, "--load", str(inputs["up"]), "--method", "scale-preserve",
                       "--data-path", inputs["data"])
    assert message.startswith(f"--load: {inputs['up']}: written with megatron-core 0.19.2 (scale.mcore_version), "
                              "newer than the installed 0.19.1"), message


def test_marker_names_a_missing_iteration(inputs: dict, tmp_path: Path) -> None:
    run = tmp_path / "resume"
    shutil.copytree(inputs["base"], run / "iter_0000005")
    (run / "latest_checkpointed_iteration.txt").write_text("7\n")
    before = _tree(run)
    message = _refused(tmp_path, "--load", str(run), "--method", "full", "--data-path", inputs["data"])
    assert message == (f"--load {run}: latest_checkpointed_iteration.txt names iteration 7 but "
                       f"{run}/iter_0000007 is missing"), message
    assert _tree(run) == before  # the run directory is left as it was


def test_resume_from_a_checkpoint_without_training_state(inputs: dict, tmp_path: Path) -> None:
    run = tmp_path / "resume"
    shutil.copytree(inputs["base"], run / "iter_0000005")  # a converted model: no train_state
    (run / "latest_checkpointed_iteration.txt").write_text("5\n")
    before = _tree(run)
    message = _refused(tmp_path, "--load", str(run), "--method", "full", "--data-path", inputs["data"])
    assert message == (f"--load {run}/iter_0000005: a model checkpoint without training state; "
                       "cannot resume from it"), message
    assert _tree(run) == before


def test_hf_tokenizer_larger_than_the_embedding(inputs: dict, tmp_path: Path) -> None:
    from megatron_scale.convert import ConversionError, convert_hf_to_megatron
    from megatron_scale.data.tokenizer import train_byte_bpe

    hf = tmp_path / "hf"
    shutil.copytree(inputs["hf"], hf)
    train_byte_bpe(["some text to learn from, some more text"] * 20, 300, str(hf))  # > vocab_size 96
    with pytest.raises(ConversionError) as e:
        convert_hf_to_megatron(hf, tmp_path / "ckpt", progress=False)
    assert str(e.value).startswith(f"{hf}/tokenizer.json has ") and "config.json's vocab_size (the embedding's rows) " \
        f"is {_hf.VOCAB}" in str(e.value), str(e.value)
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "ckpt.partial").exists()


def test_data_weight_not_a_number(inputs: dict, tmp_path: Path) -> None:
    message = _refused(tmp_path, "--load", str(inputs["base"]), "--method", "full",
                       "--data-path", "0.7", inputs["data"], "heavy", inputs["small"])
    assert message.startswith("--data-path: weights must be numbers"), message


def test_scale_flags_disagree_with_the_checkpoint(inputs: dict, tmp_path: Path) -> None:
    message = _refused(tmp_path, "--load", str(inputs["up"]), "--method", "scale-preserve", "--scale-ffn-up", "64",
                       "--data-path", inputs["data"])
    assert message.startswith(f"--load {inputs['up']}: the checkpoint's SCALE model has ffn_up=32 but "
                              "--scale-ffn-up gives 64"), message


@pytest.mark.dist
def test_an_error_inside_the_ranks_is_one_line(inputs: dict, tmp_path: Path) -> None:
    """A SCALE checkpoint whose frozen base changed passes every preflight check (its files are
    whole) and is refused by the ranks as they load it (the digest): through torchrun, with 2
    ranks raising it, one `error:` line, exit status 2, no traceback of ours, no --save."""
    from torch.distributed.checkpoint import FileSystemReader

    ckpt = tmp_path / "tampered"
    shutil.copytree(inputs["up"], ckpt)
    meta = FileSystemReader(str(ckpt)).read_metadata()
    info = next(v for k, v in meta.storage_data.items() if k.fqn == "embedding.word_embeddings.weight")
    raw = bytearray((ckpt / info.relative_path).read_bytes())
    raw[info.offset + info.length // 2] ^= 0x40
    (ckpt / info.relative_path).write_bytes(bytes(raw))
    save = tmp_path / "run"
    out = subprocess.run(command(2, "--method", "scale-preserve", "--load", str(ckpt), "--data-path", inputs["data"],
                                 "--train-iters", "3", "--save", str(save)),
                         capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ours = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(ours) == 1, out.stderr[-3000:]
    assert ours[0].startswith(f"error: {ckpt}: the frozen base does not match its recorded digest"), ours
    # no traceback of ours (torchrun adds its own ChildFailedError report for the exit status)
    frames = [line for line in out.stderr.splitlines()
              if line.lstrip().startswith('File "') and "megatron_scale/" in line]
    assert frames == [] and "CheckpointError" not in out.stderr, out.stderr[-3000:]
    assert "exitcode  : 2" in out.stderr, out.stderr[-3000:]
    assert not save.exists()

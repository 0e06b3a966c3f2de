"""Each method's entries in a checkpoint's `scale` record (methods/ record, from_record,
check_record): written in the format checkpoints have always had, read back as the method that
wrote them, and checked at every load by the class that owns each entry.
(The record policy itself is tests/checkpoint/test_records.py's; real checkpoints' records are
tested with them: tests/checkpoint/test_io.py, tests/training/test_reshard.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest


def _dims() -> object:
    from megatron_scale.scale_config import ScaleConfig

    from tests import _tiny

    return ScaleConfig(variant="adapt", adapt_layers=(1,), heads_up=4).resolve(_tiny.base_config(1))


def test_each_method_says_what_its_checkpoints_record() -> None:
    """The `scale` record is the method's own (TrainingMethod.record), in the format checkpoints
    have always had: frozen_digest, dims (None for a plain model), mcore_version, then lora for
    LoRA; and each record reads back as the method that wrote it (methods.recorded_method), with
    Freeze and LLaMA-Pro recorded as the plain model they are."""
    from megatron_scale import _mcore as mc
    from megatron_scale.methods import Freeze, Full, LlamaPro, Lora, Scale, recorded_method
    from megatron_scale.model.layers.lora import LoraSettings
    from megatron_scale.checkpoint.records import CheckpointRecords, scale_record

    dims = _dims()
    lora = Lora(settings=LoraSettings(rank=4, alpha=8.0, dropout=0.1, seed=5))
    want = {
        Full(): {"frozen_digest": "d", "dims": None, "mcore_version": mc.MCORE_VERSION},
        Freeze(layers=2): {"frozen_digest": "d", "dims": None, "mcore_version": mc.MCORE_VERSION},
        LlamaPro(blocks=1): {"frozen_digest": "d", "dims": None, "mcore_version": mc.MCORE_VERSION},
        Scale(dims=dims): {"frozen_digest": "d", "dims": dims.to_record(), "mcore_version": mc.MCORE_VERSION},
        lora: {"frozen_digest": "d", "dims": None, "mcore_version": mc.MCORE_VERSION,
               "lora": {"rank": 4, "alpha": 8.0}},
    }
    for method, record in want.items():
        got = scale_record(method, "d")
        assert list(got.items()) == list(record.items()), method  # same keys, same order, same values
    def records(record: dict) -> CheckpointRecords:
        return CheckpointRecords(directory=Path("ckpt"), model_args=None, train_state=None, layout=None, digest="d",
                                 scale=record)

    back = {m.name: recorded_method(records(r)) for m, r in want.items()}
    assert back == {"full": Full(), "freeze": Full(), "llama-pro": Full(), "scale-adapt": Scale(dims=dims),
                    "lora": Lora(settings=LoraSettings(rank=4, alpha=8.0))}


def test_a_load_compares_the_methods_record_with_the_checkpoints(tmp_path: Path) -> None:
    """TrainingMethod.check_record (what every load asks of the model's method): another kind of
    model, another geometry (router settings aside) or another LoRA rank is refused, naming the
    directory and the field; each entry by the method that owns it."""
    import dataclasses

    from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords
    from megatron_scale.methods import Full, Lora, Scale
    from megatron_scale.model.layers.lora import LoraSettings

    dims = _dims()

    def records(dims: object = None, lora: dict | None = None) -> CheckpointRecords:
        scale = {"dims": None if dims is None else dims.to_record(), **({"lora": lora} if lora is not None else {})}  # type: ignore[attr-defined]
        return CheckpointRecords(directory=tmp_path, model_args=None, train_state=None, layout=None, digest="d",
                                 scale=scale)

    lora = Lora(settings=LoraSettings(rank=4, alpha=8.0))
    Full().check_record(records(), tmp_path)
    Scale(dims=dims).check_record(records(dims), tmp_path)
    Scale(dims=dims.with_router(dataclasses.replace(dims.router, tau=0.3))).check_record(records(dims), tmp_path)
    lora.check_record(records(lora={"rank": 4, "alpha": 8.0}), tmp_path)
    refusals = [
        (Full(), records(dims), "holds a SCALE model but the model is a plain GPT model"),
        (Scale(dims=dims), records(), "holds a plain GPT model but the model is a SCALE model"),
        (Scale(dims=dataclasses.replace(dims, hidden_up=dims.hidden_up + 8)), records(dims),
         "SCALE geometry differs at 'hidden_up'"),
        (Full(), records(lora={"rank": 4, "alpha": 8.0}), "holds LoRA adapters but the model has no LoRA adapters"),
        (lora, records(lora={"rank": 8, "alpha": 8.0}), "LoRA settings differ at 'rank': checkpoint 8, model 4"),
    ]
    for method, recs, message in refusals:
        with pytest.raises(CheckpointError, match=f"{tmp_path}.*{message}"):
            method.check_record(recs, tmp_path)


def test_a_new_methods_own_record_entry_is_written_checked_and_read_back(tmp_path: Path) -> None:
    """A method with an entry of its own (here a throwaway subclass of Full) needs no change
    outside its class: scale_record writes the entry, a load refuses a checkpoint without it or
    with another value, naming the key, and a record carrying it is no plain model's (Full does
    not answer, so recorded_method refuses it rather than build the wrong model)."""
    from dataclasses import dataclass
    from typing import Any

    from megatron_scale.checkpoint.records import CheckpointError, CheckpointRecords, scale_record
    from megatron_scale.methods import Full, recorded_method

    @dataclass(kw_only=True, frozen=True)
    class Tagged(Full):
        names = ("tagged",)

        def record(self) -> dict[str, Any]:
            return {"dims": None, "tag": 3}

    record = scale_record(Tagged(), "d")
    assert list(record) == ["frozen_digest", "dims", "mcore_version", "tag"] and record["tag"] == 3

    def records(scale: dict) -> CheckpointRecords:
        return CheckpointRecords(directory=tmp_path, model_args=None, train_state=None, layout=None, digest="d",
                                 scale=scale)

    Tagged().check_record(records(record), tmp_path)
    for scale, shown in (({**record, "tag": 4}, "4"), (scale_record(Full(), "d"), "None")):
        with pytest.raises(CheckpointError, match=f"{tmp_path}: scale.tag is {shown} but the model's method .* records 3"):
            Tagged().check_record(records(scale), tmp_path)
    assert recorded_method(records(scale_record(Full(), "d"))) == Full()
    with pytest.raises(CheckpointError, match=r"scale record .*'tag'.* describes 0 training methods"):
        recorded_method(records(record))

"""SCALE checkpoints in megatron-core's torch_dist format, resharded across TP (gloo, 2 ranks).

An Adapt model (W12 in qkv/proj/fc1/fc2 of two layers, so every sharded-factory path is saved)
with trained-looking expansion weights is saved at TP=2, loaded at TP=1 (logits equal to fp32
rounding of the different all-reduce order, every global tensor bitwise equal), saved at TP=1 and
loaded back at TP=2 (logits and tensors bitwise equal to the original). Then the refusals:
a frozen tensor's bytes flipped on disk (digest mismatch), a model of another geometry, an
existing target directory, a legacy pickled common.pt. A model differing only in its router's
tau, statistic, direction and unit (evaluation settings) loads, as does a record written before
router_statistic, router_direction and router_unit (read as cosine, above, token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks

SCALE = dict(variant="adapt", adapt_layers=(1, 3), adapt_modules=("qkv", "proj", "fc1", "fc2"))


def _trained_state(seed: int = 11) -> dict[str, torch.Tensor]:
    """Global SCALE state with every trainable block perturbed away from its init."""
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.upscale import upscale_state_dict

    dims = ScaleConfig(**SCALE).resolve(_tiny.base_config(1))
    state = upscale_state_dict(_tiny.base_state_dict(tied=False), dims)
    g = torch.Generator().manual_seed(seed)
    base_keys = set(_tiny.base_state_dict(tied=False))
    return {k: v if k in base_keys else v + 0.05 * torch.randn(v.shape, generator=g) for k, v in state.items()}


def _build(tp: int, **scale_overrides: Any) -> Any:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.model.build import build_scale_gpt

    return build_scale_gpt(
        _tiny.base_config(tp), ScaleConfig(**{**SCALE, **scale_overrides}), vocab_size=_tiny.VOCAB,
        max_sequence_length=_tiny.SEQ, position_embedding_type="rope", parallel_output=False,
    ).to(_tiny.device()).eval()


def _method(model: Any) -> Any:
    """The SCALE method `model` was built for (what its checkpoints record)."""
    from megatron_scale.methods import Scale

    return Scale(dims=model.scale_dims)


def _save(model: Any, path: Path) -> Any:
    from megatron_scale.checkpoint import save_checkpoint

    return save_checkpoint(model, path, method=_method(model))


def _load(model: Any, path: Path) -> dict[str, Any]:
    from megatron_scale.checkpoint import load_checkpoint

    return load_checkpoint(model, path, method=_method(model))


def _logits(model: Any) -> torch.Tensor:
    b = _tiny.batch(seed=2)
    with torch.no_grad():
        return model(b["input_ids"], b["position_ids"], b["attention_mask"])


def _set_tp(tp: int) -> None:
    from megatron_scale import _mcore as mc

    mc.parallel_state.destroy_model_parallel()
    mc.parallel_state.initialize_model_parallel(tp)
    mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)


def _flip_frozen_byte(ckpt: Path, key: str) -> None:
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(str(ckpt)).read_metadata()
    info = next(v for k, v in meta.storage_data.items() if k.fqn == key)
    path = ckpt / info.relative_path
    raw = bytearray(path.read_bytes())
    raw[info.offset + info.length // 2] ^= 0x40
    path.write_bytes(bytes(raw))


def _body(rank: int, world: int, tmp: str) -> dict[str, Any]:
    import torch.distributed as dist

    from megatron_scale.checkpoint import CheckpointError
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict

    res: dict[str, Any] = {}
    root = Path(tmp)
    state = _trained_state()
    init_distributed(2, 1, device="cpu", seed=1234)

    m2 = _build(2)
    load_global_state_dict(m2, state)
    ref = _logits(m2)
    res["record"] = _save(m2, root / "tp2") is not None

    _set_tp(1)
    m1 = _build(1)
    record = _load(m1, root / "tp2")["scale"]
    res["record_keys"] = sorted(record)
    res["tp1_logits_err"] = float((_logits(m1) - ref).abs().max())
    g1 = global_state_dict(m1)
    res["tp1_tensors_equal"] = sorted(g1) == sorted(state) and all(torch.equal(g1[k], state[k]) for k in state)
    _save(m1, root / "tp1")

    _set_tp(2)
    back = _build(2)
    _load(back, root / "tp1")
    res["tp2_again_bitwise"] = torch.equal(_logits(back), ref)

    def refused(fn: Any) -> str:
        try:
            fn()
        except CheckpointError as e:
            return str(e)
        return ""

    # the router's settings are not geometry: a model with another tau/statistic loads, keeps its
    # own settings, and the record still holds the checkpoint's default
    other = _build(2, router_tau=0.9, router_statistic="max-prob", router_direction="below", router_unit="word")
    rec = _load(other, root / "tp1")["scale"]["dims"]
    res["other_router_loads"] = torch.equal(_logits(other.train()), _logits(back.train()))
    res["router_record"] = (rec["router_tau"], rec["router_statistic"], rec["router_direction"],
                            other.output_layer.router.tau, other.output_layer.router.direction, rec["router_unit"],
                            other.output_layer.router.unit)
    # a checkpoint written before router_statistic and router_direction existed (its record lacks them) loads
    from megatron_scale.scale_config import ScaleDims
    from megatron_scale.checkpoint.records import read_records
    from megatron_scale.methods import Scale

    to_record = ScaleDims.to_record
    ScaleDims.to_record = lambda self: {k: v for k, v in to_record(self).items() if k not in ("router_statistic", "router_direction", "router_unit")}  # type: ignore[method-assign]
    try:
        _save(back, root / "old_record")
    finally:
        ScaleDims.to_record = to_record  # type: ignore[method-assign]
    old_dims = _load(_build(2), root / "old_record")["scale"]["dims"]
    res["old_record_loads"] = all(k not in old_dims for k in ("router_statistic", "router_direction", "router_unit"))
    # the typed records: the geometry as the model has it (an old record's statistic: cosine)
    records = read_records(root / "tp1")
    res["records"] = (Scale.recorded_dims(records) == back.scale_dims, Scale.recorded_dims(records) is not None,
                      isinstance(records.digest, str), records.model_args, (records.scale or {}).get("lora"),
                      records.train_state)
    res["old_records_dims"] = Scale.recorded_dims(read_records(root / "old_record")) == back.scale_dims
    res["existing_target"] = refused(lambda: _save(back, root / "tp1"))
    res["other_geometry"] = refused(lambda: _load(_build(2, hidden_up=32), root / "tp1"))
    dist.barrier()  # every rank has finished reading tp1 before rank 0 tampers with its files
    if rank == 0:
        (root / "legacy").mkdir()
        (root / "legacy" / "common.pt").write_bytes(b"not a pickle")
        _flip_frozen_byte(root / "tp1", "embedding.word_embeddings.weight")
    dist.barrier()
    res["legacy"] = refused(lambda: _load(_build(2), root / "legacy"))
    res["tampered"] = refused(lambda: _load(_build(2), root / "tp1"))
    return res


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(_body, 2, str(tmp_path_factory.mktemp("ckpt")))


@pytest.mark.dist
def test_reshard_tp2_to_tp1_and_back(results: list) -> None:
    for r in results:
        assert r["record_keys"] == ["dims", "frozen_digest", "mcore_version"]
        assert r["tp1_logits_err"] < 1e-5
        assert r["tp1_tensors_equal"]
        assert r["tp2_again_bitwise"]


@pytest.mark.dist
def test_refusals_name_the_problem(results: list) -> None:
    for r in results:
        assert "exists" in r["existing_target"]
        assert r["other_router_loads"]
        assert r["router_record"] == (0.5, "cosine", "above", 0.9, "below", "token", "word")
        assert r["old_record_loads"]
        assert r["records"] == (True, True, True, None, None, None)
        assert r["old_records_dims"]
        assert "hidden_up" in r["other_geometry"]
        assert "common.pt" in r["legacy"]
        assert "digest" in r["tampered"]

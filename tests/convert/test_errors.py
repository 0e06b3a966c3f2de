"""Every bad conversion input stops with one ConversionError naming the file, key or flag,
before any rank starts and before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from megatron_scale.convert import (
    ConversionError,
    convert_hf_to_megatron,
    convert_megatron_to_hf,
)
from megatron_scale.convert.hf_config import from_hf_config, read_hf_config, to_hf_config
from tests.convert import _hf


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hf") / "model"
    _hf.make_hf(folder, tied=False)
    return folder


def _copy(src: Path, dst: Path, edit_config: dict | None = None, drop: str | None = None,
          reshape: str | None = None, extra: str | None = None) -> Path:
    from safetensors.torch import save_file

    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(edit_config or {})
    (dst / "config.json").write_text(json.dumps(cfg))
    tensors = _hf.read_folder(src)
    if drop:
        tensors.pop(drop)
    if reshape:
        tensors[reshape] = tensors[reshape][:-1].clone()
    if extra:
        tensors[extra] = torch.ones(8)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def _fails(match: str, *args: object, **kw: object) -> None:
    with pytest.raises(ConversionError, match=match):
        convert_hf_to_megatron(*args, **kw)  # type: ignore[arg-type]


def test_tp_not_dividing_heads_names_the_flag(hf_dir: Path, tmp_path: Path) -> None:
    _fails(r"--tensor-model-parallel-size 3 does not divide num_attention_heads=8", hf_dir, tmp_path / "o", tp=3)
    _fails(r"--pipeline-model-parallel-size 3 does not divide num_layers=4", hf_dir, tmp_path / "o", pp=3)
    assert not (tmp_path / "o").exists()


def test_missing_tensor_names_folder_and_key(hf_dir: Path, tmp_path: Path) -> None:
    bad = _copy(hf_dir, tmp_path / "bad", drop="model.layers.2.mlp.up_proj.weight")
    _fails(r"bad: tensor 'model.layers.2.mlp.up_proj.weight' is missing", bad, tmp_path / "o")


def test_wrong_shape_names_file_and_key(hf_dir: Path, tmp_path: Path) -> None:
    bad = _copy(hf_dir, tmp_path / "bad", reshape="model.layers.1.self_attn.k_proj.weight")
    _fails(r"model.safetensors: tensor 'model.layers.1.self_attn.k_proj.weight' has shape \(31, 64\)",
           bad, tmp_path / "o")


def test_unexplained_tensor_and_pickles_refused(hf_dir: Path, tmp_path: Path) -> None:
    bad = _copy(hf_dir, tmp_path / "bad", extra="model.layers.0.self_attn.q_norm.weight")
    _fails(r"bad: 1 tensor\(s\) this Llama config does not explain, first: \['model.layers.0.self_attn.q_norm",
           bad, tmp_path / "o")
    pick = tmp_path / "pickled"
    pick.mkdir()
    (pick / "config.json").write_text((hf_dir / "config.json").read_text())
    (pick / "pytorch_model.bin").write_bytes(b"not read")
    _fails(r"pickled weights are never read", pick, tmp_path / "o")


def test_config_errors_name_the_key(hf_dir: Path, tmp_path: Path) -> None:
    cfg = json.loads((hf_dir / "config.json").read_text())
    rope = dict(cfg["rope_parameters"], low_freq_factor=2.0)
    with pytest.raises(ConversionError, match=r"rope_parameters.low_freq_factor=2.0 is not supported"):
        from_hf_config({**cfg, "rope_parameters": rope})
    with pytest.raises(ConversionError, match=r"model_type 'mistral' is not supported"):
        from_hf_config({**cfg, "model_type": "mistral"})
    with pytest.raises(ConversionError, match=r"missing key 'intermediate_size'"):
        from_hf_config({k: v for k, v in cfg.items() if k != "intermediate_size"})
    with pytest.raises(ConversionError, match=r"no config.json"):
        read_hf_config(tmp_path)


def test_legacy_rope_keys_read_like_rope_parameters(hf_dir: Path) -> None:
    cfg = json.loads((hf_dir / "config.json").read_text())
    rope = dict(cfg.pop("rope_parameters"))
    legacy = {**cfg, "rope_theta": rope.pop("rope_theta"), "rope_scaling": rope}
    assert from_hf_config(legacy) == read_hf_config(hf_dir)
    args = read_hf_config(hf_dir)
    assert args.rope_scaling and args.rotary_base == 500000.0 and args.rope_scaling_factor == 8.0
    # what we write back is what we read
    assert from_hf_config(to_hf_config(args)) == args


def test_export_refusals(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match=r"nope does not exist"):
        convert_megatron_to_hf(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(ConversionError, match=r"not a megatron-core torch_dist checkpoint"):
        convert_megatron_to_hf(tmp_path / "ckpt", tmp_path / "out")
    (tmp_path / "ckpt" / "common.pt").write_bytes(b"x")
    with pytest.raises(ConversionError, match=r"refusing to unpickle"):
        convert_megatron_to_hf(tmp_path / "ckpt", tmp_path / "out")
    assert not (tmp_path / "out").exists()

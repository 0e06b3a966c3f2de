"""HF Llama -> megatron-core -> HF, and base -> SCALE checkpoints (gloo, 2 ranks, one spawn).

Tiny random Llama models (tests/convert/_hf.py: GQA, Llama 3.x RoPE scaling, tied and untied)
are converted with `convert_hf_to_megatron` at TP=1, TP=2 and PP=2. In the spawned ranks each
checkpoint is loaded (checkpoint.load_checkpoint) into megatron-core's GPTModel at the layout it
was saved at and run; here, in the test process, its logits are compared with transformers'
LlamaForCausalLM (fp32, max |diff| <= 1e-5 x max(1, max |logit|)), and every checkpoint is exported back with
`convert_megatron_to_hf` and compared with the original safetensors bitwise. The same
checkpoints go through `upscale_checkpoint` for every variant; the SCALE model loaded from the
result has preservation-head logits bitwise equal to the base model's (same layout), and its
global state equals `upscale_state_dict` of the base. A model with RoPE scaling switched off
must miss the HF logits (the comparison can fail), and megatron-core's RoPE frequencies equal HF's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import _tiny
from tests._dist import run_ranks
from tests.convert import _hf
from tests.convert._mg import megatron_logits

LAYOUTS = ((1, 1), (2, 1), (1, 2))
VARIANTS = ("preserve", "adapt", "route")
UPSCALE_LAYOUT = {True: (2, 1), False: (1, 2)}  # where each base is upscaled and checked


def _body(rank: int, world: int, root: str) -> dict[str, Any]:
    from megatron_scale.checkpoint import load_checkpoint
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint
    from megatron_scale.model.build import Parallel, build_model
    from megatron_scale.methods import Full
    from megatron_scale.methods.load import load_model
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_head
    from megatron_scale.model.weights.state import global_state_dict
    from megatron_scale.upscale import upscale_state_dict

    torch.set_num_threads(1)  # tests/convert/conftest.py
    init_distributed(1, 1, device="cpu")
    base = Path(root)
    ids = _hf.tokens()
    res: dict[str, Any] = {}
    for tied in (True, False):
        for tp, pp in LAYOUTS:
            out = base / f"mg-{tied}-{tp}{pp}"
            convert_hf_to_megatron(base / f"hf-{tied}", out, tp=tp, pp=pp, progress=False)
            loaded = load_model(out, Parallel(tp=tp, pp=pp), _tiny.device())
            model, args = loaded.model.eval(), loaded.reader.model_args()
            res[f"{tied}/{tp}{pp}"] = megatron_logits(model, ids)
            if (tp, pp) == (1, 1):
                res[f"{tied}/inv_freq"] = model.rotary_pos_emb.inv_freq.clone()
                plain = build_model(dataclasses.replace(args, rope_scaling=False), Full()).to(_tiny.device()).eval()
                load_checkpoint(plain, out, method=Full())
                res[f"{tied}/no_rope_scaling"] = megatron_logits(plain, ids)
            if (tp, pp) != UPSCALE_LAYOUT[tied]:
                continue
            for variant in VARIANTS:
                sc_dir = base / f"sc-{tied}-{tp}{pp}-{variant}"
                sc = ScaleConfig(variant=variant, heads_up=4, init="svd", seed=7)
                upscale_checkpoint(out, sc_dir, sc, tp=tp, pp=pp)
                scaled = load_model(sc_dir, Parallel(tp=tp, pp=pp), _tiny.device()).model.eval()
                with output_head(scaled, "preserve"):
                    z_p = megatron_logits(scaled, ids)
                ref = res[f"{tied}/{tp}{pp}"]
                key = f"{tied}/{tp}{pp}/{variant}"
                res[key + "/preserve_bitwise"] = ref is None or torch.equal(z_p, ref)
                full = upscale_state_dict(global_state_dict(model), scaled.scale_dims)
                got = global_state_dict(scaled)
                res[key + "/state"] = sorted(got) == sorted(full) and all(torch.equal(got[k], full[k]) for k in full)
    return res


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("convert")
    hf = {}
    for tied in (True, False):
        model = _hf.make_hf(root / f"hf-{tied}", tied, seed=int(tied))
        with torch.no_grad():
            hf[tied] = model(_hf.tokens()).logits
        hf[f"{tied}/inv_freq"] = model.model.rotary_emb.inv_freq.clone()
    ranks = run_ranks(_body, 2, str(root))
    return {"root": root, "hf": hf, "ranks": ranks}


@pytest.mark.dist
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: f"tp{x[0]}pp{x[1]}")
def test_megatron_logits_equal_hf(results: dict, tied: bool, layout: tuple[int, int]) -> None:
    tp, pp = layout
    ref = results["hf"][tied]
    got = [r[f"{tied}/{tp}{pp}"] for r in results["ranks"]]
    got = [g for g in got if g is not None]
    assert len(got) == (1 if pp == 2 else 2)
    for g in got:
        assert g.shape == ref.shape
        err = float((g - ref).abs().max())
        assert err <= 1e-5 * max(1.0, float(ref.abs().max())), err
    assert float(ref.abs().max()) > 1.0  # logits are not trivially small


@pytest.mark.dist
@pytest.mark.parametrize("tied", [True, False])
def test_rope_scaling_matches_hf_and_matters(results: dict, tied: bool) -> None:
    r = results["ranks"][0]
    hf_freq = results["hf"][f"{tied}/inv_freq"]
    assert torch.allclose(r[f"{tied}/inv_freq"].float(), hf_freq.float(), rtol=1e-6, atol=0)
    # without scaling, megatron-core computes other frequencies and misses HF's logits
    assert float((r[f"{tied}/no_rope_scaling"] - results["hf"][tied]).abs().max()) > 1e-3


@pytest.mark.dist
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: f"tp{x[0]}pp{x[1]}")
def test_hf_megatron_hf_bitwise(results: dict, tied: bool, layout: tuple[int, int]) -> None:
    from megatron_scale.convert import convert_megatron_to_hf

    tp, pp = layout
    root = results["root"]
    out = root / f"back-{tied}-{tp}{pp}"
    summary = convert_megatron_to_hf(root / f"mg-{tied}-{tp}{pp}", out, progress=False, max_shard_bytes=150_000)
    orig, back = _hf.read_folder(root / f"hf-{tied}"), _hf.read_folder(out)
    assert sorted(orig) == sorted(back)
    assert all(torch.equal(orig[k], back[k]) for k in orig), [k for k in orig if not torch.equal(orig[k], back[k])]
    assert summary["shards"] > 1 and summary["parameters"] == sum(t.numel() for t in orig.values())
    assert ("lm_head.weight" in back) != tied


@pytest.mark.dist
@pytest.mark.parametrize("tied", [True, False])
def test_upscaled_checkpoint_preserves_base(results: dict, tied: bool) -> None:
    tp, pp = UPSCALE_LAYOUT[tied]
    for r in results["ranks"]:
        for variant in VARIANTS:
            key = f"{tied}/{tp}{pp}/{variant}"
            assert r[key + "/preserve_bitwise"], key
            assert r[key + "/state"], key


@pytest.mark.dist
def test_preserve_head_only_export_is_the_original_model(results: dict) -> None:
    from megatron_scale.convert import convert_megatron_to_hf

    root = results["root"]
    for tied in (True, False):
        out = root / f"preserve-only-{tied}"
        tp, pp = UPSCALE_LAYOUT[tied]
        summary = convert_megatron_to_hf(root / f"sc-{tied}-{tp}{pp}-route", out, preserve_head_only=True, progress=False)
        assert summary["kind"] == "llama (preservation head)"
        orig, back = _hf.read_folder(root / f"hf-{tied}"), _hf.read_folder(out)
        assert sorted(orig) == sorted(back) and all(torch.equal(orig[k], back[k]) for k in orig)


@pytest.mark.dist
def test_export_tool_verify_force_and_tokenizer(results: dict, capsys: pytest.CaptureFixture) -> None:
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import convert_megatron_to_hf as tool

    root = results["root"]
    (root / "tok").mkdir()
    (root / "tok" / "tokenizer.json").write_text("{}")
    out = root / "tool-out"
    out.mkdir()
    argv = ["--load", str(root / "mg-False-12"), "--save", str(out), "--tokenizer", str(root / "tok"),
            "--verify", "--verify-tolerance", "1e-5", "--no-progress"]
    assert tool.main(argv) == 2
    assert "exists; refusing to overwrite it without --force" in capsys.readouterr().err
    assert tool.main([*argv, "--force"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["verify_max_abs_error"] <= 1e-5
    assert (out / "tokenizer.json").is_file() and (out / "model.safetensors.index.json").is_file()
    assert not [p for p in root.iterdir() if p.name.startswith(".tool-out")]  # no temp folders left


@pytest.mark.dist
def test_upscale_refusals_name_the_flag(results: dict) -> None:
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import ConversionError, upscale_checkpoint

    root = results["root"]
    # h' = 2 alone is one KV group of 2 (the base ratio), which 2 ranks cannot share: the flag given is named
    with pytest.raises(ConversionError, match=r"--scale-heads-up.*not divisible by the tensor-parallel size 2.*nearest valid"):
        upscale_checkpoint(root / "mg-True-21", root / "never", ScaleConfig(heads_up=2), tp=2)
    with pytest.raises(ConversionError, match=r"already a SCALE checkpoint"):
        upscale_checkpoint(root / "sc-True-21-route", root / "never", ScaleConfig())
    with pytest.raises(ConversionError, match=r"--save .*mg-False-11 exists"):
        upscale_checkpoint(root / "mg-True-21", root / "mg-False-11", ScaleConfig(heads_up=4), tp=2)
    assert not (root / "never").exists()


@pytest.mark.dist
def test_verify_tolerance_scales_and_catches_one_bad_weight(results: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A correct bfloat16 export of a float32 checkpoint passes (its reference runs on the same
    rounded weights) with the tolerance reported beside the error; the same export with one
    element of one weight moved fails and writes nothing."""
    from megatron_scale.convert import ConversionError, convert_megatron_to_hf
    from megatron_scale.convert import to_hf as to_hf_module
    from megatron_scale.convert.verify import RTOL

    root = results["root"]
    good = convert_megatron_to_hf(root / "mg-False-11", root / "verify-bf16", dtype="bfloat16", verify=True, progress=False)
    err, tol = good["verify_max_abs_error"], good["verify_tolerance"]
    assert err <= tol and tol > 2 * RTOL, good  # the bound scales with the largest logit (> 1 here)
    target = "model.layers.1.mlp.down_proj.weight"
    write = to_hf_module.write_shards

    def one_bad_weight(items, *a, **k):  # type: ignore[no-untyped-def]
        def moved():  # type: ignore[no-untyped-def]
            for name, t in items:
                if name == target:
                    t = t.clone()
                    t[3, 5] += 0.05
                yield name, t
        return write(moved(), *a, **k)

    monkeypatch.setattr(to_hf_module, "write_shards", one_bad_weight)
    with pytest.raises(ConversionError, match=r"--verify: exported logits differ .* by \S+, above the tolerance \S+ \(bfloat16"):
        convert_megatron_to_hf(root / "mg-False-11", root / "verify-bad", dtype="bfloat16", verify=True, progress=False)
    assert not (root / "verify-bad").exists()

"""The exported SCALE model under transformers' generation contract, on the installed release.

transformers 5.24 renamed the KV cache (`past_key_values` -> `cache`) in what generate() hands to
forward() and reads back; the export ignored the new name and every cached step after the first
ran without its past. These tests hold whatever the contract becomes: a folder written as the
export writes it (config with auto_map, the package's modeling files copied in, a tokenizer),
loaded with trust_remote_code=True, with every expansion block moved off its init so that the
adaptation head, the preservation head and the router all differ:
- greedy generate() with the cache, without it, and a plain argmax loop over full forwards give
  the same tokens, for every output head;
- a left-padded batch gives each row's single-prompt continuation (the argmax loop's);
- save_pretrained then from_pretrained gives the same model (and keeps the folder guarded);
- a bf16 load computes in bf16, close to fp32, and generates;
- pipeline("text-generation") continues a text as the argmax loop does.
No Megatron here: test_scale_export.py checks the export against megatron-core."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

VOCAB = 48
WORDS = [f"w{i}" for i in range(VOCAB - 2)]
HEADS = ("adapt", "preserve", "route")


def _tokenizer(folder: Path) -> None:
    """A word-level tokenizer over WORDS (+ <unk>, the padding, and </s>, which the model never
    emits as an end: its config has no eos, so every generation runs its full length)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>", pad_token="<unk>")
    fast.save_pretrained(folder)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from megatron_scale.convert.hf_modeling.configuration_scale_llama import ScaleLlamaConfig
    from megatron_scale.convert.hf_modeling.modeling_scale_llama import ScaleLlamaForCausalLM
    from megatron_scale.convert.scale_export import FILES, MODELING

    out = tmp_path_factory.mktemp("hf_generation") / "scale"
    config = ScaleLlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        scale_hidden_up=8, scale_heads_up=2, scale_groups_up=1, scale_ffn_up=16, scale_variant="route",
        scale_w12=[[2, "qkv"], [2, "fc2"]], scale_router_tau=0.8, scale_router_statistic="cosine",
        scale_tied_output=True, bos_token_id=None, eos_token_id=None, pad_token_id=0,
        architectures=["ScaleLlamaForCausalLM"],
        auto_map={"AutoConfig": "configuration_scale_llama.ScaleLlamaConfig",
                  "AutoModelForCausalLM": "modeling_scale_llama.ScaleLlamaForCausalLM"},
    )
    torch.manual_seed(0)
    model = ScaleLlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.normal_(0, 1.0)
            elif name == "lm_head.weight_up":
                p.normal_(0, 1.5)
            else:
                p.normal_(0, 0.2)
    model.save_pretrained(out)
    for name in FILES:
        shutil.copy2(MODELING / name, out / name)
    _tokenizer(out)
    return out


def _load(folder: Path, dtype: torch.dtype = torch.float32) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=dtype).eval()


@pytest.fixture(scope="module")
def model(folder: Path) -> Any:
    return _load(folder)


def _prompt(batch: int = 2, length: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _argmax_loop(model: Any, ids: torch.Tensor, new: int) -> torch.Tensor:
    """Greedy decoding by full recomputation: no cache, no generate()."""
    with torch.no_grad():
        for _ in range(new):
            nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat((ids, nxt), dim=1)
    return ids


def _generate(model: Any, ids: torch.Tensor, new: int, **kw: Any) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=new, do_sample=False, **kw)


@pytest.mark.parametrize("head", HEADS)
def test_cached_and_uncached_greedy_agree(model: Any, head: str) -> None:
    model.config.scale_output_head = head
    try:
        ids = _prompt()
        ref = _argmax_loop(model, ids, 10)
        assert torch.equal(_generate(model, ids, 10, use_cache=True), ref)
        assert torch.equal(_generate(model, ids, 10, use_cache=False), ref)
    finally:
        model.config.scale_output_head = "auto"


def test_the_heads_differ(model: Any) -> None:
    """Else the tests above would not tell a head from another: the router uses both heads."""
    ids = _prompt(length=24)
    out = {}
    for head in HEADS:
        model.config.scale_output_head = head
        with torch.no_grad():
            out[head] = model(ids).logits
    model.config.scale_output_head = "auto"
    share = float(model.last_route_keep.float().mean())
    assert float((out["adapt"] - out["preserve"]).abs().max()) > 1.0
    assert 0.05 < share < 0.95, share


def test_left_padded_batch_gives_each_rows_own_continuation(model: Any) -> None:
    rows = [_prompt(1, 9, seed=2)[0], _prompt(1, 4, seed=3)[0], _prompt(1, 6, seed=4)[0]]
    width = max(len(r) for r in rows)
    pad = model.config.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], mask[i, width - len(r):] = r, 1
    batch = _generate(model, ids, 8, attention_mask=mask, pad_token_id=pad)
    for i, r in enumerate(rows):
        alone = _argmax_loop(model, r[None], 8)
        assert torch.equal(batch[i, width:], alone[0, len(r):]), (i, batch[i], alone[0])


def test_save_pretrained_then_from_pretrained_round_trips(model: Any, folder: Path, tmp_path: Path) -> None:
    model.save_pretrained(tmp_path / "again")
    cfg = json.loads((tmp_path / "again" / "config.json").read_text())
    assert cfg["hidden_act"].startswith("silu (a SCALE model") and cfg["auto_map"]["AutoModelForCausalLM"]
    again = _load(tmp_path / "again")
    ids = _prompt(length=12)
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
    assert torch.equal(_generate(again, ids, 6), _generate(model, ids, 6))
    ours, theirs = dict(model.named_parameters()), dict(again.named_parameters())
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_bf16_load_computes_in_bf16_close_to_fp32(model: Any, folder: Path) -> None:
    half = _load(folder, torch.bfloat16)
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    ids = _prompt(length=12)
    with torch.no_grad():
        got, ref = half(ids).logits, model(ids).logits
    assert got.dtype == torch.bfloat16
    assert float((got.float() - ref).abs().max()) <= 0.05 * float(ref.abs().max())
    out = _generate(half, ids, 5)
    assert out.shape == (2, 17) and torch.equal(out[:, :12], ids)


def test_text_generation_pipeline_continues_as_the_argmax_loop(model: Any, folder: Path) -> None:
    from transformers import AutoTokenizer, pipeline

    tok = AutoTokenizer.from_pretrained(folder)
    text = " ".join(WORDS[i] for i in (3, 17, 5, 29, 11))
    pipe = pipeline("text-generation", model=str(folder), trust_remote_code=True, dtype=torch.float32)
    got = pipe(text, max_new_tokens=6, do_sample=False, return_full_text=False)[0]["generated_text"]
    ids = tok(text, return_tensors="pt").input_ids
    ref = _argmax_loop(model, ids, 6)[0, ids.shape[1]:]
    assert got.split() == tok.decode(ref).split() and len(got.split()) == 6


def test_a_folder_without_a_router_direction_reads_above(model: Any, folder: Path, tmp_path: Path) -> None:
    """config.json without scale_router_direction (as every export before it) loads with the paper's
    direction, z_p where the statistic >= tau; route_direction="below" keeps the others (and ties).
    Without scale_router_unit (and its codes) it routes per token, as before."""
    from transformers import AutoModelForCausalLM

    old = tmp_path / "old"
    shutil.copytree(folder, old)
    cfg = json.loads((old / "config.json").read_text())
    cfg.pop("scale_router_direction", None)
    assert cfg.pop("scale_router_unit") == "token"
    cfg.pop("scale_router_unit_codes", None)
    (old / "config.json").write_text(json.dumps(cfg))
    legacy = AutoModelForCausalLM.from_pretrained(old, trust_remote_code=True, dtype=torch.float32).eval()
    assert legacy.config.scale_router_direction == "above"
    assert legacy.config.scale_router_unit == "token" and legacy.config.scale_router_unit_codes is None
    ids = _prompt(length=24)
    with torch.no_grad():
        assert torch.equal(legacy(ids).logits, model(ids).logits)
        above = legacy.last_route_keep.clone()
        legacy(ids, route_direction="below")
        below = legacy.last_route_keep.clone()
        with pytest.raises(ValueError, match="scale_router_direction 'up'"):
            legacy(ids, route_direction="up")
    assert bool((above | below).all()) and 0 < int(below.sum()) < below.numel()

"""The fused view (convert/fused_view.py, hf_modeling/modeling_scale_llama_fused.py) against the SCALE
export it is made from, in-process on tests/convert/_scale_models.py's tiny models (Preserve, Adapt
with W12, and Preserve on a tied base, every expansion block non-zero; the first two 40 wide over 6
heads, which transformers' LlamaConfig alone would refuse, the third 48), and under the call pattern
of vLLM's and SGLang's Transformers backends, through transformers alone (no engine runs here):

- its logits are the SCALE model's adaptation head z_a, its hidden states the SCALE model's at every
  layer, its greedy generate() the same tokens, and it saves, loads and stays guarded;
- with no split (scale_norm_split 0) it is exactly a stock LlamaForCausalLM holding the same
  tensors: the split norm is the only module of its own;
- what the backends need holds: AutoModel in auto_map giving the base model, is_backend_compatible()
  (the SCALE export says it is not), every weight in an nn.Linear or the embedding, q/k/v sized by
  the config's heads, no norm an engine would replace by a plain RMSNorm, and the base model called
  as the backends call it (their own d+d' embedding, an attention function registered with
  transformers that gets the engine's kwargs and layer_idx, no mask, return_dict=False), with their
  LM head on top, gives z_a;
- Route and a gate are refused, naming the head the view would serve.
The export from a Megatron checkpoint (the tool's --fused-view) is tests/convert/test_scale_export.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.convert import _scale_models as sm

FUSED = ("configuration_scale_llama.py", "routing_scale_llama.py", "modeling_scale_llama_fused.py")


@pytest.fixture(scope="module")
def pairs() -> dict[str, tuple[Any, Any]]:
    """name -> (SCALE export emitting z_a, its fused view)."""
    out = {}
    for name, variant, tied, up in (("preserve", "preserve", False, 8), ("adapt", "adapt", False, 8),
                                    ("preserve-tied", "preserve", True, 16)):
        model = sm.scale(variant, sm.llama(tied), hidden_up=up)
        model.config.scale_output_head = "adapt"
        out[name] = (model, sm.fused(model))
    return out


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def test_logits_hidden_states_and_generate_are_the_adaptation_head(pairs: dict[str, tuple[Any, Any]]) -> None:
    x = sm.ids(length=16)
    for name, (model, view) in pairs.items():
        with torch.no_grad():
            ours = model(x, output_hidden_states=True)
            theirs = view(x, output_hidden_states=True)
            model.config.scale_output_head = "preserve"
            z_p = model(x).logits
            model.config.scale_output_head = "adapt"
        assert _close(theirs.logits, ours.logits), name
        assert not _close(theirs.logits, z_p, 1e-2), name  # z_a, not z_p
        for a, b in zip(theirs.hidden_states, ours.hidden_states, strict=True):
            assert _close(a, b), name
        prompt = x[:, :6]
        with torch.no_grad():
            got = view.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
            ref = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
        assert torch.equal(got, ref), name


def test_without_a_split_it_is_a_stock_llama(pairs: dict[str, tuple[Any, Any]]) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from megatron_scale.convert.hf_modeling.configuration_scale_llama import ScaleFusedLlamaConfig
    from megatron_scale.convert.hf_modeling.modeling_scale_llama_fused import ScaleFusedLlamaForCausalLM

    _, view = pairs["preserve-tied"]  # 48 = 6 x 8 wide: a geometry LlamaConfig takes
    cfg = {k: v for k, v in view.config.to_dict().items() if not k.startswith("scale_")}
    cfg.update(hidden_act="silu", architectures=["LlamaForCausalLM"])
    cfg.pop("auto_map")
    llama = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    llama.load_state_dict(view.state_dict(), strict=True)
    plain = ScaleFusedLlamaForCausalLM(ScaleFusedLlamaConfig(**{**view.config.to_dict(), "scale_norm_split": 0})).eval()
    plain.load_state_dict(view.state_dict(), strict=True)
    x = sm.ids()
    with torch.no_grad():
        assert torch.equal(plain(x).logits, llama(x).logits)
        assert not _close(view(x).logits, llama(x).logits, 1e-3)  # the split is what differs


def _probe_attention(calls: list[tuple[int, bool, bool]]) -> Any:
    """An attention function as an engine registers one: it finds its own state by module.layer_idx
    and the engine's kwargs, gets no mask (transformers makes none for an unknown implementation),
    and attends causally itself."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def attend(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        instances = kwargs.pop("attention_instances", None)
        calls.append((module.layer_idx, instances is not None and module.layer_idx in instances,
                      attention_mask is None))
        kwargs.pop("is_causal", None)
        return sdpa_attention_forward(module, query, key, value, None, is_causal=True, **kwargs)

    return attend


def test_the_transformers_backend_call_pattern(pairs: dict[str, tuple[Any, Any]], tmp_path: Path) -> None:
    import json

    from safetensors.torch import load_file
    from transformers import AttentionInterface, AutoConfig, AutoModel

    from megatron_scale.convert.hf_modeling.modeling_scale_llama import ScaleLlamaForCausalLM

    model, view = pairs["adapt"]
    folder = sm.save(view, tmp_path / "fused", FUSED)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_scale_llama_fused.ScaleFusedLlamaModel"
    assert config["hidden_size"] == sm.D + sm.UP["scale_hidden_up"] and config["tie_word_embeddings"] is False
    calls: list[tuple[int, bool, bool]] = []
    AttentionInterface.register("scale_engine_probe", _probe_attention(calls))
    cfg = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    base = AutoModel.from_pretrained(folder, config=cfg, trust_remote_code=True, dtype=torch.float32).eval()
    assert type(base).__name__ == "ScaleFusedLlamaModel" and type(base).is_backend_compatible()
    assert not ScaleLlamaForCausalLM.is_backend_compatible()
    owners = {type(m).__name__ for m in base.modules() if next(m.parameters(recurse=False), None) is not None}
    assert owners == {"Linear", "Embedding", "ScaleSplitNorm"}, owners  # all an engine swaps, and the norm
    assert not any(type(m).__name__.endswith("RMSNorm") for m in base.modules())
    attn = base.layers[0].self_attn
    assert attn.q_proj.out_features == cfg.num_attention_heads * cfg.head_dim
    assert attn.k_proj.out_features == attn.v_proj.out_features == cfg.num_key_value_heads * cfg.head_dim
    weights = load_file(str(folder / "model.safetensors"))
    engine_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)  # sized from the config, as the engines do
    engine_embedding.weight.data.copy_(weights["model.embed_tokens.weight"])
    base.set_input_embeddings(engine_embedding)
    base.config._attn_implementation = "scale_engine_probe"
    x = sm.ids(1, 10)
    positions = torch.arange(10)[None]
    instances = {i: object() for i in range(cfg.num_hidden_layers)}
    with torch.no_grad():
        by_ids = base(input_ids=x, inputs_embeds=None, use_cache=False, position_ids=positions,
                      attention_instances=instances, return_dict=False)
        by_embeds = base(input_ids=None, inputs_embeds=engine_embedding(x), use_cache=False, position_ids=positions,
                         attention_instances=instances, return_dict=False)
        z_a = model(x).logits
    assert isinstance(by_ids, tuple)
    assert calls == [(i, True, True) for i in range(cfg.num_hidden_layers)] * 2
    for out in (by_ids, by_embeds):
        logits = out[0] @ weights["lm_head.weight"].T  # the engine's LM head, [V, d + d']
        assert _close(logits, z_a)


def test_it_saves_loads_and_stays_guarded(pairs: dict[str, tuple[Any, Any]], tmp_path: Path) -> None:
    import json

    from transformers import AutoModelForCausalLM

    _, view = pairs["preserve-tied"]
    folder = sm.save(view, tmp_path / "fused", FUSED)
    assert json.loads((folder / "config.json").read_text())["hidden_act"].startswith("silu (a SCALE model")
    again = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    assert type(again).__name__ == "ScaleFusedLlamaForCausalLM"
    x = sm.ids()
    with torch.no_grad():
        assert torch.equal(again(x).logits, view(x).logits)
    with pytest.raises(Exception, match="trust_remote_code=True"):
        AutoModelForCausalLM.from_pretrained(folder)


def test_route_and_gate_are_refused_naming_the_head_served() -> None:
    from megatron_scale.convert import ConversionError
    from megatron_scale.convert.fused_view import check_fusable
    from megatron_scale.scale_config import ScaleDims

    dims = ScaleDims(num_layers=2, hidden=32, hidden_up=8, heads=4, heads_up=2, groups=2, groups_up=1, head_dim=8,
                     ffn=64, ffn_up=16, variant="adapt", init="svd", init_std=0.02)
    check_fusable(dims, "ckpt")
    import dataclasses

    with pytest.raises(ConversionError, match=r"^--fused-view: ckpt is SCALE-Route, .* serves the adaptation head z_a"):
        check_fusable(dataclasses.replace(dims, variant="route"), "ckpt")
    with pytest.raises(ConversionError, match=r"^--fused-view: ckpt gates W_out_up's term \(scale gate max-prob\); "
                                              r"the fused view serves the adaptation head z_a .* ungated"):
        check_fusable(dims.with_training({"gate_statistic": "max-prob"}), "ckpt")

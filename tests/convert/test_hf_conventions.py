"""The SCALE export under transformers' conventions, each behaviour held against the same call on a
stock LlamaForCausalLM of the same tiny base shape, in the same test (tests/convert/_scale_models.py:
Preserve, Adapt with W12 and a tied Route model, every expansion block non-zero).

transformers' own ModelTesterMixin / GenerationTesterMixin live in its repository's tests/, not in
the wheel, and the stored copies of those files are older than the locked release; so these tests
check, for a causal LM, what they check: outputs, hidden states and attentions (and their shapes),
return_dict, eager / sdpa / flex equal, padding, packed sequences and custom 4-D masks, dynamic and
static caches and compiled generate, inputs_embeds, greedy / beam / sampled / assisted generation,
generation outputs and continuing a cache, logits_to_keep, resize_token_embeddings, gradient
checkpointing, the loss kwargs and Trainer with gradient accumulation, the base model through
AutoModel, and unknown settings refused. Save / load, left-padded batches, bf16 and the pipeline
are tests/convert/test_hf_generation.py's; equality with megatron-core, test_scale_export.py's.

Where the reference can be exact it is: Preserve's and Route's first d dims of every hidden state,
their base heads' attention and their z_p are the Llama's (the base path is untouched by SCALE).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from megatron_scale.convert.hf_modeling.modeling_scale_llama import CACHE_FIELD
from tests.convert import _scale_models as sm

VARIANTS = sm.VARIANTS


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    bases = {tied: sm.llama(tied) for tied in (False, True)}
    out: dict[str, Any] = {"llama": bases[False], "llama_tied": bases[True]}
    for v in VARIANTS:
        out[v] = sm.scale(v, bases[sm.TIED[v]])
    return out


def _pairs(models: dict[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """(variant, SCALE model, its Llama reference)."""
    for v in VARIANTS:
        yield v, models[v], models["llama_tied" if sm.TIED[v] else "llama"]


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


@pytest.fixture()
def eager(models: dict[str, Any]) -> Iterator[None]:
    for m in models.values():
        m.set_attn_implementation("eager")
    yield
    for m in models.values():
        m.set_attn_implementation("sdpa")


def test_the_heads_differ_and_route_uses_both(models: dict[str, Any]) -> None:
    """Else the tests below would not tell one head from another."""
    x = sm.ids(length=24)
    with torch.no_grad():
        for v in VARIANTS:
            m = models[v]
            z = {}
            for head in ("preserve", "adapt"):
                m.config.scale_output_head = head
                z[head] = m(x).logits
            m.config.scale_output_head = "auto"
            assert not _close(z["adapt"], z["preserve"], 1e-2), v
        models["route"](x)
        share = float(models["route"].last_route_keep.float().mean())
    assert 0.1 < share < 0.9, share


@pytest.mark.usefixtures("eager")
def test_outputs_hidden_states_attentions_and_return_dict(models: dict[str, Any]) -> None:
    x = sm.ids()
    d, h = sm.D, sm.HEADS
    for v, m, ref in _pairs(models):
        with torch.no_grad():
            out = m(x, output_hidden_states=True, output_attentions=True)
            r = ref(x, output_hidden_states=True, output_attentions=True)
            m.config.scale_output_head = "preserve"
            z_p = m(x).logits
            m.config.scale_output_head = "auto"
            as_tuple, ref_tuple = m(x, return_dict=False), ref(x, return_dict=False)
            last = m.model(x).last_hidden_state
        assert len(out.hidden_states) == len(r.hidden_states) == sm.LAYERS + 1, v
        assert len(out.attentions) == len(r.attentions) == sm.LAYERS, v
        width = d + sm.UP["scale_hidden_up"]
        assert all(t.shape == (2, 12, width) for t in out.hidden_states), v
        assert all(t.shape == (2, h + sm.UP["scale_heads_up"], 12, 12) for t in out.attentions), v
        assert torch.equal(out.hidden_states[-1], last)  # the last is the normed output, as Llama's
        assert torch.equal(r.hidden_states[-1], ref.model(x).last_hidden_state)
        assert type(as_tuple) is type(ref_tuple) is tuple and torch.equal(as_tuple[0], out.logits)
        assert torch.equal(out.hidden_states[0][..., :d], r.hidden_states[0])  # [E | E_up]
        if v == "adapt":  # W12 moves the base path
            assert not _close(out.hidden_states[-1][..., :d], r.hidden_states[-1], 1e-3)
            continue
        for ours, theirs in zip(out.hidden_states, r.hidden_states, strict=True):
            assert _close(ours[..., :d], theirs), v
        for ours, theirs in zip(out.attentions, r.attentions, strict=True):
            assert _close(ours[:, :h], theirs), v  # base heads read base K/V only
        assert _close(z_p, r.logits), v


def _uncompiled_flex(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers compiles flex attention and its block masks with inductor (minutes on this
    machine); the same functions uncompiled compute the same attention."""
    from torch.nn.attention.flex_attention import flex_attention
    from transformers import masking_utils
    from transformers.integrations import flex_attention as fa

    block_mask = masking_utils.create_block_mask
    monkeypatch.setattr(masking_utils, "create_block_mask", lambda *a, **k: block_mask(*a, **{**k, "_compile": False}))
    monkeypatch.setattr(fa.WrappedFlexAttention, "_is_flex_compiled", True)
    monkeypatch.setattr(fa.WrappedFlexAttention, "_compiled_flex_attention", staticmethod(flex_attention))
    monkeypatch.setattr(fa.WrappedFlexAttention, "training", False, raising=False)


def test_attention_implementations_agree_and_eager_runs_eager(models: dict[str, Any],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _uncompiled_flex(monkeypatch)
    x = sm.ids()
    mask = torch.ones_like(x)
    mask[1, :3] = 0  # left padding in one row
    for name in ("llama", *VARIANTS):
        m = models[name]
        got = {}
        try:
            for impl in ("eager", "sdpa", "flex_attention"):
                m.set_attn_implementation(impl)
                assert m.config._attn_implementation == impl
                with torch.no_grad():
                    got[impl] = m(x, attention_mask=mask, output_attentions=impl != "flex_attention")
        finally:
            m.set_attn_implementation("sdpa")
        # eager runs eager: it alone returns the attention probabilities (SDPA computes none)
        assert len(got["eager"].attentions) == sm.LAYERS and not got["sdpa"].attentions, name
        keep = mask.bool()
        for impl in ("sdpa", "flex_attention"):
            assert _close(got[impl].logits[keep], got["eager"].logits[keep]), (name, impl)


def test_flash_attention_is_asked_for_as_from_llama(models: dict[str, Any]) -> None:
    """Where flash-attn is not installed, asking for it fails as it fails for Llama (not with
    "does not support Flash Attention")."""
    errors = []
    for name in ("llama", "adapt"):
        try:
            models[name].set_attn_implementation("flash_attention_2")
            errors.append(None)
        except Exception as e:  # noqa: BLE001 (the same failure is the point)
            errors.append(type(e))
            assert "does not support" not in str(e), str(e)
        finally:
            models[name].set_attn_implementation("sdpa")
    assert errors[0] is errors[1]


def test_padding_packing_and_custom_masks(models: dict[str, Any]) -> None:
    """Two sequences packed in one row with position_ids restarting at 0 (packing collators, no KV
    cache: transformers looks for packing only then) give each sequence's own logits, as does a
    block-diagonal 4-D mask (SDPA's boolean form); a left-padded row its own."""
    a, b = sm.ids(1, 7, seed=5), sm.ids(1, 5, seed=6)
    packed = torch.cat((a, b), 1)
    pos = torch.cat((torch.arange(7), torch.arange(5)))[None]
    block = torch.zeros(1, 1, 12, 12, dtype=torch.bool)
    block[..., :7, :7] = torch.ones(7, 7).tril().bool()
    block[..., 7:, 7:] = torch.ones(5, 5).tril().bool()
    padded = torch.cat((torch.zeros(1, 5, dtype=torch.long), a), 1)
    pad_mask = torch.cat((torch.zeros(1, 5), torch.ones(1, 7)), 1).long()
    for name in ("llama", *VARIANTS):
        m = models[name]
        with torch.no_grad():
            alone = torch.cat((m(a).logits, m(b).logits), 1)
            by_position = m(packed, position_ids=pos, use_cache=False).logits
            by_mask = m(packed, attention_mask=block, position_ids=pos).logits
            left = m(padded, attention_mask=pad_mask, position_ids=(pad_mask.cumsum(-1) - 1).clamp_min(0)).logits
            causal = m(packed, use_cache=False).logits
        assert _close(by_position, alone) and _close(by_mask, alone), name
        assert _close(left[:, 5:], alone[:, :7]), name
        assert not _close(causal[:, 7:], alone[:, 7:], 1e-3), name  # the reference can fail


def _compile_config() -> Any:
    from transformers import CompileConfig

    config = CompileConfig(backend="eager", fullgraph=True)  # dynamo's capture without inductor's codegen
    config._compile_all_devices = True  # generate() compiles on CUDA only unless told
    return config


def _generate(m: Any, x: torch.Tensor, new: int = 6, **kw: Any) -> torch.Tensor:
    with torch.no_grad():
        return m.generate(x, max_new_tokens=new, min_new_tokens=new, do_sample=False, **kw)


def test_static_cache_and_compiled_generate(models: dict[str, Any]) -> None:
    """generate() with a StaticCache gives the dynamic cache's tokens, as Llama's does, and so does
    the Route model compiled whole (fullgraph: both heads and the router in one graph; per-unit
    routing runs outside it). One compile only: dynamo's trace costs ~20 s here."""
    x = sm.ids(2, 7)
    for name in ("llama", *VARIANTS):
        m = models[name]
        ref = _generate(m, x)
        assert torch.equal(_generate(m, x, cache_implementation="static"), ref), name
    route = models["route"]
    compiled = _generate(route, x, cache_implementation="static", compile_config=_compile_config())
    assert hasattr(route, "_compiled_call")  # it did compile
    assert torch.equal(compiled, _generate(route, x))


def test_inputs_embeds_forward_and_generate(models: dict[str, Any]) -> None:
    x = sm.ids(2, 7)
    for name in ("llama", *VARIANTS):
        m = models[name]
        embeds = m.get_input_embeddings()(x)
        with torch.no_grad():
            assert torch.equal(m(inputs_embeds=embeds).logits, m(x).logits), name
            new = m.generate(inputs_embeds=embeds, max_new_tokens=5, do_sample=False)
        assert torch.equal(new, _generate(m, x, 5)[:, 7:]), name  # only the new tokens, as Llama
    with pytest.raises(ValueError, match=r"inputs_embeds of width 32: .* d \+ d' = 40 wide"):
        models["adapt"](inputs_embeds=models["llama"].get_input_embeddings()(x))
    with pytest.raises(ValueError, match="scale_router_unit 'char' routes by the tokens' bytes: pass input_ids"):
        models["route"](inputs_embeds=models["route"].get_input_embeddings()(x), route_unit="char")


def test_generation_strategies_outputs_and_cache_continuation(models: dict[str, Any]) -> None:
    x = sm.ids(2, 6)
    for name in ("llama", *VARIANTS):
        m = models[name]
        greedy = _generate(m, x)
        with torch.no_grad():
            beam = [m.generate(x, max_new_tokens=4, num_beams=3, do_sample=False, use_cache=c) for c in (True, False)]
            torch.manual_seed(7)
            sampled = m.generate(x, max_new_tokens=4, do_sample=True, top_k=0)
            torch.manual_seed(7)
            again = m.generate(x, max_new_tokens=4, do_sample=True, top_k=0)
            lookup = m.generate(x[:1], max_new_tokens=6, min_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=2)
            first = m.generate(x, max_new_tokens=3, min_new_tokens=3, do_sample=False, return_dict_in_generate=True,
                               output_scores=True, output_logits=True, output_hidden_states=True)
            cache = {CACHE_FIELD: getattr(first, CACHE_FIELD)}  # `cache` from transformers 5.24, before: past_key_values
            more = m.generate(first.sequences, **cache, max_new_tokens=3, min_new_tokens=3, do_sample=False)
            full = m(greedy[:, :-1]).logits
            tail = m(greedy[:, :-1], logits_to_keep=2).logits
        assert torch.equal(beam[0], beam[1]), name
        assert torch.equal(sampled, again), name
        assert torch.equal(lookup, greedy[:1]), name  # candidates verified against the model, cache cropped
        assert torch.equal(more, greedy), name
        assert len(first.scores) == len(first.logits) == len(first.hidden_states) == 3, name
        assert len(first.hidden_states[0]) == sm.LAYERS + 1, name
        assert torch.equal(tail, full[:, -2:]), name


def test_resize_token_embeddings(models: dict[str, Any], tmp_path: Path) -> None:
    """Growing the vocabulary keeps every old logit of each head (Route's router reads the statistic
    over the whole vocabulary, so its choice may move with new rows: its heads are compared); the
    new rows of E and E_up (and W_out, W_out_up) are transformers' mean initialisation of each
    block; shrinking keeps the first rows; the Route model's token codes follow (new tokens: EMPTY)
    and the resized model saves and loads."""
    from transformers import AutoModelForCausalLM

    from megatron_scale.convert.hf_modeling.routing_scale_llama import EMPTY, decode_codes

    x = sm.ids()
    v = sm.VOCAB
    low = x.clamp_max(v - 5)
    for name in ("llama", "llama_tied", *VARIANTS):
        m = copy.deepcopy(models[name])
        if name == "route":
            m.config.scale_output_head = "adapt"
        with torch.no_grad():
            before, before_low = m(x).logits, m(low).logits
        m.resize_token_embeddings(v + 6)
        assert m.config.vocab_size == v + 6, name
        with torch.no_grad():
            after = m(x).logits
        assert after.shape[-1] == v + 6 and torch.equal(after[..., :v], before), name
        emb, head = m.get_input_embeddings(), m.lm_head
        blocks = [emb.weight, getattr(emb, "weight_up", None), head.weight, getattr(head, "weight_up", None)]
        for block in (b for b in blocks if b is not None):
            assert block.shape[0] == v + 6, name
            mean = block[:v].float().mean(0)
            assert float((block[v:] - mean).abs().max()) < 1e-3, name
        m.resize_token_embeddings(v - 4)
        with torch.no_grad():
            assert torch.equal(m(low).logits, before_low[..., : v - 4]), name
    route = copy.deepcopy(models["route"])
    route.resize_token_embeddings(v + 3)
    codes = decode_codes(route.config.scale_router_unit_codes, v + 3)
    assert torch.equal(codes[:v], decode_codes(sm.unit_codes(), v)) and bool((codes[v:] == EMPTY).all())
    sm.save(route, tmp_path / "resized")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "resized", trust_remote_code=True, dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(again(x, route_unit="char").logits, route(x, route_unit="char").logits)


def _grads(m: Any, x: torch.Tensor) -> dict[str, torch.Tensor]:
    m.zero_grad()
    m(x, labels=x).loss.backward()
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def test_gradient_checkpointing_gives_the_same_gradients(models: dict[str, Any]) -> None:
    x = sm.ids()
    for name in ("llama", *VARIANTS):
        m = copy.deepcopy(models[name]).train()
        plain = _grads(m, x)
        m.gradient_checkpointing_enable()
        assert m.is_gradient_checkpointing, name
        checkpointed = _grads(m, x)
        assert plain.keys() == checkpointed.keys() and len(plain) == len(list(m.parameters())), name
        for k in plain:
            assert _close(checkpointed[k], plain[k], 1e-6), (name, k)


def test_loss_is_transformers_causal_lm_loss_with_num_items(models: dict[str, Any]) -> None:
    """Labels shift inside, -100 is ignored, and num_items_in_batch makes it a sum over that many
    tokens (what Trainer passes under gradient accumulation)."""
    x = sm.ids()
    labels = x.clone()
    labels[0, 8:] = -100
    for name in ("llama", *VARIANTS):
        m = models[name]
        with torch.no_grad():
            logits = m(x).logits
            mean = m(x, labels=labels).loss
            summed = m(x, labels=labels, num_items_in_batch=torch.tensor(5)).loss
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="none")
        valid = labels[:, 1:].flatten() != -100
        assert torch.allclose(mean, ce[valid].mean(), atol=1e-6), name
        assert torch.allclose(summed, ce[valid].sum() / 5, atol=1e-6), name


def _trainer_step(m: Any, rows: list[dict[str, torch.Tensor]], accumulate: int, out: Path) -> dict:
    """One SGD step of transformers' Trainer, micro-batches of one row, `accumulate` of them."""
    from transformers import Trainer, TrainingArguments

    m = copy.deepcopy(m).train()
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=1,
                             gradient_accumulation_steps=accumulate, max_steps=1, learning_rate=0.5,
                             lr_scheduler_type="constant", optim="sgd", weight_decay=0.0, max_grad_norm=0.0,
                             report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=0,
                             disable_tqdm=True)
    Trainer(model=m, args=args, train_dataset=rows).train()
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def _one_batch_step(m: Any, rows: list[dict[str, torch.Tensor]], lr: float = 0.5) -> dict:
    """The same step by hand: the mean loss over every labelled token of all rows, one SGD step."""
    m = copy.deepcopy(m).train()
    batch = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
    m(**batch).loss.backward()
    with torch.no_grad():
        return {n: p - lr * p.grad for n, p in m.named_parameters()}


def test_trainer_gradient_accumulation_equals_one_batch(models: dict[str, Any], tmp_path: Path) -> None:
    """Trainer over four rows of different lengths (padding labelled -100) as four accumulated
    micro-batches of one steps as one batch of four does, for the Llama and for SCALE: the model
    normalises by num_items_in_batch, which Trainer then trusts (ignoring it made the accumulated
    step 4 times too large)."""
    x = sm.ids(4, 10, seed=11)
    rows = []
    for i, n in enumerate((10, 7, 4, 9)):
        labels = x[i].clone()
        labels[n:] = -100
        rows.append({"input_ids": x[i], "attention_mask": (labels != -100).long(), "labels": labels})
    for name in ("llama", "adapt"):
        start = dict(models[name].named_parameters())
        ref = _one_batch_step(models[name], rows)
        got = _trainer_step(models[name], rows, 4, tmp_path / name)
        assert max(float((ref[k] - start[k]).abs().max()) for k in ref) > 1e-3, name
        for k in ref:
            assert _close(got[k] - start[k], ref[k] - start[k], 1e-4), (name, k)


def test_auto_model_is_the_base_model(models: dict[str, Any], tmp_path: Path) -> None:
    """AutoModel gives the decoder stack, called as a base model is (keywords, defaults, a
    BaseModelOutputWithPast or a tuple), as for the Llama; it says it is not a serving engines'
    backend model (they would serve another function: the fused view is)."""
    from transformers import AutoModel

    x = sm.ids()
    folder = sm.save(models["adapt"], tmp_path / "adapt")
    models["llama"].save_pretrained(tmp_path / "llama")
    base = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    llama = AutoModel.from_pretrained(tmp_path / "llama", dtype=torch.float32).eval()
    assert type(base).__name__ == "ScaleLlamaModel" and type(llama).__name__ == "LlamaModel"
    with torch.no_grad():
        for m, full in ((base, models["adapt"]), (llama, models["llama"])):
            out = m(input_ids=x, use_cache=True)
            ref = full(x, output_hidden_states=True).hidden_states[-1]
            assert torch.equal(out.last_hidden_state, ref)
            assert getattr(out, CACHE_FIELD).get_seq_length() == x.shape[1]
            assert torch.equal(m(input_ids=x, return_dict=False)[0], ref)
    assert not type(base).is_backend_compatible() and type(llama).is_backend_compatible()


def test_unknown_settings_are_refused_naming_the_key() -> None:
    from megatron_scale.convert.hf_modeling.configuration_scale_llama import ScaleLlamaConfig

    kw = {**sm.llama_kwargs(False), **sm.UP}
    ScaleLlamaConfig(**kw)  # the defaults are fine
    cases = [({"scale_router_taus": 0.5}, r"unknown key\(s\) \['scale_router_taus'\]"),
             ({"rope_parameters": {"rope_type": "nope", "rope_theta": 1e4}}, "rope_parameters.rope_type 'nope'"),
             ({"scale_output_head": "both"}, "scale_output_head 'both'"),
             ({"scale_router_statistic": "entropy"}, "scale_router_statistic 'entropy'"),
             ({"scale_gate_statistic": "cosine"}, "scale_gate_statistic 'cosine'"),
             ({"scale_router_tau": float("nan")}, "scale_router_tau nan: must be a finite number"),
             ({"scale_variant": "widen"}, "scale_variant 'widen'"),
             ({"scale_groups_up": 2}, "scale_heads_up 2 / scale_groups_up 2"),
             ({"scale_w12": [[5, "qkv"]]}, r"scale_w12 entry \[5, 'qkv'\]"),
             ({"scale_router_unit_codes": "AAAA"}, "scale_router_unit_codes: 3 codes for a vocabulary of 64")]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            ScaleLlamaConfig(**{**kw, **change})

"""SCALE checkpoints -> Hugging Face folders that transformers loads with trust_remote_code.

In spawned ranks (gloo, 2, TP=2): a tiny HF Llama (_hf.py) is converted, upscaled for every
variant (Preserve and Adapt untied, with W12 in every module of the upper layers for Adapt;
Route tied), every trainable block is perturbed (as if trained, so that the expansion changes
the output) and the model is saved; its logits (default head: z_a, routed for Route), its
preservation-head logits, its routing share and a greedy continuation (full recomputation)
are taken from megatron-core. Here each checkpoint is exported with convert_megatron_to_hf and
loaded by AutoModelForCausalLM(trust_remote_code=True): logits match to 1e-5 x max(1, max|z|),
generate() (greedy, KV cache) gives the same tokens, with and without cache, and the exported
preservation head reproduces the original HF model's logits. A router override (max-prob, the
median tau, direction "below") exported and given per call routes as megatron-core does with it.
Per character and per word (router unit; tests/_unit_vocab.py's byte-level vocabulary and Korean
string): the export routes as megatron-core told the labels, at every position whose label the
export can see (all but the last), and generate() (with and without KV cache) gives megatron-core's
greedy tokens where each step's unknown label is the one the export's causal rule assumes.
The fused view (--fused-view) of Preserve and Adapt gives megatron-core's adaptation head and greedy
tokens, is refused for Route naming the head it serves, and tools/bench_inference.py runs on the
base model, the SCALE export and the fused view (its FLOP counts checked, nothing timed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from megatron_scale.scale_options import RouterOverride
from tests import _tiny, _unit_vocab
from tests._dist import run_ranks
from tests.convert import _hf
from tests.convert._mg import greedy, megatron_logits

CASES = {"preserve": False, "adapt": False, "route": True}  # variant -> tied embeddings
PROMPT, NEW = 8, 6


def _perturb(model: Any, seed: int) -> None:
    """Move every trainable block off its init (deterministic, global tensors)."""
    from megatron_scale.model.weights.state import global_state_dict, load_global_state_dict

    g = torch.Generator().manual_seed(seed)
    state = global_state_dict(model)
    for key in sorted(state):
        t = state[key]
        if "layernorm" in key or "layer_norm" in key:
            if key.endswith("_up"):
                state[key] = t + 0.2 * torch.randn(t.shape, generator=g)
        elif key == "output_layer.weight_up":
            state[key] = t + 0.8 * torch.randn(t.shape, generator=g)
        elif key.endswith("weight_up"):
            state[key] = t + 0.3 * torch.randn(t.shape, generator=g)
        elif ".weight_12" in key or key.endswith(("weight_21", "weight_22")):
            state[key] = t + 0.08 * torch.randn(t.shape, generator=g)
    load_global_state_dict(model, state)


def _body(rank: int, world: int, root: str) -> dict[str, Any]:
    from megatron_scale.checkpoint import save_checkpoint
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_head, output_layers

    torch.set_num_threads(1)  # tests/convert/conftest.py
    init_distributed(1, 1, device="cpu")
    base = Path(root)
    ids = _hf.tokens(seq=24)
    res: dict[str, Any] = {}
    for tied in (True, False):
        convert_hf_to_megatron(base / f"hf-{tied}", base / f"mg-{tied}", tp=2, progress=False)
    for variant, tied in CASES.items():
        sc = ScaleConfig(variant=variant, heads_up=4, seed=3, router_tau=0.8,
                         adapt_modules=("qkv", "proj", "fc1", "fc2"))
        upscale_checkpoint(base / f"mg-{tied}", base / f"up-{variant}", sc, tp=2)
        loaded = load_model(base / f"up-{variant}", Parallel(tp=2), _tiny.device())
        model, method, reader = loaded.model.eval(), loaded.method, loaded.reader
        _perturb(model, seed=11)
        save_checkpoint(model, base / f"sc-{variant}", method=method, model_args=reader.model_args().to_json())
        out = output_layers(model)[0]
        out.reset_route_counts()
        res[f"{variant}/logits"] = megatron_logits(model, ids)
        res[f"{variant}/preserve_share"] = out.preserve_fraction
        with output_head(model, "preserve"):
            res[f"{variant}/z_p"] = megatron_logits(model, ids)
        with output_head(model, "adapt"):
            res[f"{variant}/z_a"] = megatron_logits(model, ids)
        res[f"{variant}/greedy"] = greedy(model, ids[:, :PROMPT], NEW)
        if variant == "route":  # an evaluation-time router override: another statistic, tau and direction
            from megatron_scale.route_stats.token_records import token_records
            from megatron_scale.model.layers.heads import router_settings

            with output_head(model, "preserve"):
                z_p = megatron_logits(model, ids)
            stat = token_records(z_p, res["route/z_a"], ids.to(z_p.device), None, ("max-prob",))["stat/max-prob"]
            # halfway between the two middle statistics: no token sits on tau, where the last bit of a TP=2
            # all-reduce against the export's single-device sum could flip its side
            mid = stat.flatten().sort().values[stat.numel() // 2 - 1 : stat.numel() // 2 + 1]
            res["override_tau"] = float(mid.mean())
            with router_settings(model, RouterOverride(tau=res["override_tau"], statistic="max-prob", direction="below")):
                res["route/override_logits"] = megatron_logits(model, ids)
                res["route/override_greedy"] = greedy(model, ids[:, :PROMPT], NEW)
            res.update(_per_unit(model, ids))
    return res


def _unit_ids(ids: torch.Tensor) -> torch.Tensor:
    """Two rows: the Korean string, and random tokens."""
    korean = torch.tensor(_unit_vocab.encode(_unit_vocab.KOREAN, _unit_vocab.pieces(_hf.VOCAB)))
    return torch.stack((korean, ids[1, : korean.numel()].cpu()))


def _per_unit(model: Any, ids: torch.Tensor) -> dict[str, Any]:
    """Megatron-core's routing per character and per word, told the labels; its greedy tokens with
    each step's unknown label chosen to join or start a unit as the export's causal rule does
    (modeling_scale_llama.UnitRouter: join when the text ends inside a character; per word, unless
    the last token is special), computed here with model/layers/route_units.py's own functions."""
    from megatron_scale.model.layers.heads import router_settings, set_unit_codes
    from megatron_scale.model.layers.route_units import EMPTY, pending_after, piece_codes

    table = _unit_vocab.pieces(_hf.VOCAB)
    codes = piece_codes(table)
    cont = table.index(b"\x84")  # a lone continuation byte: joins any unit
    set_unit_codes(model, codes)
    u = _unit_ids(ids)
    out: dict[str, Any] = {"unit_ids": u}
    for unit in ("char", "word"):
        with router_settings(model, RouterOverride(unit=unit)):
            labels = torch.cat((u[:, 1:], u[:, -1:]), dim=1)
            out[f"route/{unit}_logits"] = megatron_logits(model, u, route_labels=labels)
            seq = u[:, :PROMPT]
            for _ in range(NEW):
                special = (codes[seq[:, -1]] & EMPTY) != 0
                join = (pending_after(codes, seq) > 0) if unit == "char" else torch.ones_like(special)
                last = torch.where(join & ~special, cont, 0)
                logits = megatron_logits(model, seq, route_labels=torch.cat((seq[:, 1:], last[:, None]), dim=1))
                seq = torch.cat((seq, logits[:, -1].argmax(-1, keepdim=True).cpu()), dim=1)
            out[f"route/{unit}_greedy"] = seq
    set_unit_codes(model, None)
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from megatron_scale.convert import convert_megatron_to_hf

    root = tmp_path_factory.mktemp("scale_export")
    hf_logits = {}
    for tied in (True, False):
        model = _hf.make_hf(root / f"hf-{tied}", tied, seed=int(tied))
        with torch.no_grad():
            hf_logits[tied] = model(_hf.tokens(seq=24)).logits
    mg = run_ranks(_body, 2, str(root))[0]
    exported = {}
    for variant in CASES:
        summary = convert_megatron_to_hf(root / f"sc-{variant}", root / f"hf-{variant}", progress=False,
                                         verify=variant == "route", tolerance=1e-4)
        model = AutoModelForCausalLM.from_pretrained(root / f"hf-{variant}", trust_remote_code=True,
                                                     dtype=torch.float32).eval()
        exported[variant] = (summary, model)
    tau = mg["override_tau"]
    summary = convert_megatron_to_hf(root / "sc-route", root / "hf-route-override", progress=False, verify=True,
                                     tolerance=1e-4, route=RouterOverride(tau=tau, statistic="max-prob", direction="below"))
    model = AutoModelForCausalLM.from_pretrained(root / "hf-route-override", trust_remote_code=True,
                                                 dtype=torch.float32).eval()
    exported["route-override"] = (summary, model)
    for variant in ("preserve", "adapt"):
        summary = convert_megatron_to_hf(root / f"sc-{variant}", root / f"fused-{variant}", progress=False,
                                         fused_view=True, verify=variant == "adapt", tolerance=1e-4)
        model = AutoModelForCausalLM.from_pretrained(root / f"fused-{variant}", trust_remote_code=True,
                                                     dtype=torch.float32).eval()
        exported[f"fused-{variant}"] = (summary, model)
    tok = _unit_vocab.write_tokenizer(str(root / "unit-tok"), _unit_vocab.pieces(_hf.VOCAB))
    for unit in ("char", "word"):
        summary = convert_megatron_to_hf(root / "sc-route", root / f"hf-route-{unit}", progress=False, verify=True,
                                         tolerance=1e-4, tokenizer=tok, route=RouterOverride(unit=unit))
        model = AutoModelForCausalLM.from_pretrained(root / f"hf-route-{unit}", trust_remote_code=True,
                                                     dtype=torch.float32).eval()
        exported[f"route-{unit}"] = (summary, model)
    return {"root": root, "hf": hf_logits, "mg": mg, "exported": exported}


def _close(got: torch.Tensor, ref: torch.Tensor) -> float:
    assert got.shape == ref.shape
    return float((got - ref).abs().max()) / max(1.0, float(ref.abs().max()))


@pytest.mark.dist
@pytest.mark.parametrize("variant", list(CASES))
def test_exported_logits_equal_megatron(results: dict, variant: str) -> None:
    summary, model = results["exported"][variant]
    mg = results["mg"]
    assert summary["kind"] == f"scale-{variant}" and type(model).__name__ == "ScaleLlamaForCausalLM"
    ids = _hf.tokens(seq=24)
    with torch.no_grad():
        got = model(ids).logits
        share = None if model.last_route_keep is None else float(model.last_route_keep.float().mean())
    assert _close(got, mg[f"{variant}/logits"]) <= 1e-5
    # the expansion moved the output: the default head is not the preservation head
    assert float((mg[f"{variant}/z_a"] - mg[f"{variant}/z_p"]).abs().max()) > 1e-2
    for head in ("preserve", "adapt"):
        model.config.scale_output_head = head
        with torch.no_grad():
            assert _close(model(ids).logits, mg[f"{variant}/z_{head[0]}"]) <= 1e-5, head
    model.config.scale_output_head = "auto"
    if variant == "route":
        assert 0.05 < mg["route/preserve_share"] < 0.95, mg["route/preserve_share"]  # both heads are used
        assert share == pytest.approx(mg["route/preserve_share"])
        assert summary["verify_max_abs_error"] <= 1e-4


@pytest.mark.dist
@pytest.mark.parametrize("variant", list(CASES))
def test_generate_matches_megatron_greedy(results: dict, variant: str) -> None:
    _, model = results["exported"][variant]
    ref = results["mg"][f"{variant}/greedy"]
    prompt = ref[:, :PROMPT]
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=NEW, do_sample=False, use_cache=True)
        plain = model.generate(prompt, max_new_tokens=NEW, do_sample=False, use_cache=False)
    assert torch.equal(cached, ref), (cached, ref)
    assert torch.equal(plain, ref)


@pytest.mark.dist
@pytest.mark.parametrize("variant", list(CASES))
def test_exported_preservation_head_is_the_original_model(results: dict, variant: str) -> None:
    _, model = results["exported"][variant]
    model.config.scale_output_head = "preserve"
    try:
        with torch.no_grad():
            got = model(_hf.tokens(seq=24)).logits
    finally:
        model.config.scale_output_head = "auto"
    tied = CASES[variant]
    ref = results["hf"][tied]
    if variant == "adapt":  # trained W12 moves the base path: the preservation head has moved too
        assert _close(got, ref) > 1e-3
    else:
        assert _close(got, ref) <= 1e-5


@pytest.mark.dist
def test_exported_folder_is_self_contained(results: dict) -> None:
    import json

    from megatron_scale.convert import fused_view, scale_export

    folder = results["root"] / "hf-adapt"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["auto_map"]["AutoModelForCausalLM"] == "modeling_scale_llama.ScaleLlamaForCausalLM"
    assert cfg["auto_map"]["AutoModel"] == "modeling_scale_llama.ScaleLlamaModel"
    assert [2, "fc1"] in cfg["scale_w12"] and [1, "qkv"] not in cfg["scale_w12"]
    for root, files in ((folder, scale_export.FILES), (results["root"] / "fused-adapt", fused_view.FILES)):
        for name in files:
            imports = [line for line in (root / name).read_text().splitlines() if line.startswith(("import ", "from "))]
            roots = {line.split()[1].split(".")[0] for line in imports}
            assert roots <= {"__future__", "base64", "collections", "inspect", "math", "typing", "torch",
                             "transformers", ""}, (name, roots)


@pytest.mark.dist
def test_preserve_head_only_refuses_a_moved_base_path(results: dict) -> None:
    from megatron_scale.convert import ConversionError, convert_megatron_to_hf

    root = results["root"]
    with pytest.raises(ConversionError, match=r"--preserve-head-only: .* non-zero W12 .*weight_12.layer2"):
        convert_megatron_to_hf(root / "sc-adapt", root / "adapt-preserve-only", preserve_head_only=True)
    assert not (root / "adapt-preserve-only").exists()


@pytest.mark.dist
def test_tokenizer_loads_without_remote_code_and_the_model_only_with_it(results: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """As users write it: AutoTokenizer.from_pretrained(folder) (no question asked: transformers
    asks through input(), which fails here) and AutoModelForCausalLM with trust_remote_code; without
    it the folder refuses to load as a plain Llama, naming trust_remote_code."""
    import builtins

    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    from megatron_scale.convert import convert_megatron_to_hf
    from megatron_scale.data.tokenizer import train_byte_bpe

    root = results["root"]
    tok_dir = train_byte_bpe(["a few words of text to learn from"] * 10, 300, str(root / "tok"))
    out = root / "hf-route-tok"
    convert_megatron_to_hf(root / "sc-route", out, tokenizer=tok_dir, progress=False)

    def asked(*args: object, **kwargs: object) -> str:
        raise AssertionError(f"transformers asked: {args}")

    monkeypatch.setattr(builtins, "input", asked)
    tok = AutoTokenizer.from_pretrained(out)
    text = "a few words, and some more"
    assert tok(text).input_ids == PreTrainedTokenizerFast(tokenizer_file=tok_dir + "/tokenizer.json")(text).input_ids
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, dtype=torch.float32)
    assert type(model).__name__ == "ScaleLlamaForCausalLM"
    with pytest.raises(Exception, match="trust_remote_code=True"):
        AutoModelForCausalLM.from_pretrained(out)


def test_router_override_at_export_forward_and_generate(results: dict) -> None:
    """An export at another statistic, tau and direction ("below": z_p where max-prob <= tau)
    routes exactly as the Megatron model does with that override, as does the default export
    given them per call (forward and generate)."""
    import json

    from megatron_scale.convert import ConversionError, convert_megatron_to_hf

    mg, root, tau = results["mg"], results["root"], results["mg"]["override_tau"]
    ref = mg["route/override_logits"]
    assert _close(ref, mg["route/logits"]) > 1e-3  # the override routes differently from the default
    summary, overridden = results["exported"]["route-override"]
    cfg = json.loads((root / "hf-route-override" / "config.json").read_text())
    assert (cfg["scale_router_tau"], cfg["scale_router_statistic"], cfg["scale_router_direction"]) == (
        tau, "max-prob", "below")
    assert summary["verify_max_abs_error"] <= 1e-4  # --verify ran the megatron model at the override
    _, default = results["exported"]["route"]
    default_cfg = json.loads((root / "hf-route" / "config.json").read_text())
    assert (default_cfg["scale_router_statistic"], default_cfg["scale_router_direction"]) == ("cosine", "above")
    ids = _hf.tokens(seq=24)
    prompt = mg["route/override_greedy"][:, :PROMPT]
    with torch.no_grad():
        assert _close(overridden(ids).logits, ref) <= 1e-5
        share = float(overridden.last_route_keep.float().mean())
        assert share == 0.5, share  # below the median max-prob: half the tokens keep z_p
        assert _close(default(ids, route_tau=tau, route_statistic="max-prob", route_direction="below").logits, ref) <= 1e-5
        # the other direction at the same tau routes the complement: another function
        assert _close(default(ids, route_tau=tau, route_statistic="max-prob").logits, ref) > 1e-3
        out = default.generate(prompt, max_new_tokens=NEW, do_sample=False, route_tau=tau, route_statistic="max-prob",
                               route_direction="below")
    assert torch.equal(out, mg["route/override_greedy"])
    with pytest.raises(ConversionError, match="--route-tau: only a SCALE-Route"):
        convert_megatron_to_hf(root / "sc-adapt", root / "adapt-tau", route=RouterOverride(tau=0.7))
    with pytest.raises(ConversionError, match="--route-direction: only a SCALE-Route"):
        convert_megatron_to_hf(root / "sc-adapt", root / "adapt-direction", route=RouterOverride(direction="below"))
    with pytest.raises(ConversionError, match="--route-direction: unknown router direction 'up'"):
        convert_megatron_to_hf(root / "sc-route", root / "route-up", route=RouterOverride(direction="up"))
    with pytest.raises(ConversionError, match="--route-tau: tau must be a finite number"):
        convert_megatron_to_hf(root / "sc-route", root / "route-nan", route=RouterOverride(tau=float("nan")))


@pytest.mark.dist
@pytest.mark.parametrize("unit", ["char", "word"])
def test_router_unit_at_export_forward_and_generate(results: dict, unit: str) -> None:
    """An export deciding per character / word routes as megatron-core does, told the labels, at
    every position but the last (whose label only megatron-core's evaluation knows), and so does the
    per-token export given route_unit= per call with the codes; generate() with and without KV
    cache gives megatron-core's greedy tokens under the export's causal rule."""
    import json

    from megatron_scale.model.layers.route_units import piece_codes

    root, mg = results["root"], results["mg"]
    summary, model = results["exported"][f"route-{unit}"]
    assert summary["verify_max_abs_error"] <= 1e-4
    cfg = json.loads((root / f"hf-route-{unit}" / "config.json").read_text())
    assert cfg["scale_router_unit"] == unit
    codes = torch.frombuffer(bytearray(__import__("base64").b64decode(cfg["scale_router_unit_codes"])), dtype=torch.uint8)
    assert torch.equal(codes, piece_codes(_unit_vocab.pieces(_hf.VOCAB)))
    ids, ref = mg["unit_ids"], mg[f"route/{unit}_logits"]
    with torch.no_grad():
        got = model(ids).logits
        per_token = model(ids, route_unit="token").logits
        keep = model.last_route_keep
    assert _close(got[:, :-1], ref[:, :-1]) <= 1e-5
    assert _close(per_token[:, :-1], ref[:, :-1]) > 1e-3  # the unit changes the routing
    assert 0 < float(keep.float().mean()) < 1
    _, char_model = results["exported"]["route-char"]
    with torch.no_grad():  # a unit given per call routes as the export recorded with it
        assert _close(char_model(ids, route_unit=unit).logits[:, :-1], ref[:, :-1]) <= 1e-5
    greedy_ref = mg[f"route/{unit}_greedy"]
    with torch.no_grad():
        cached = model.generate(greedy_ref[:, :PROMPT], max_new_tokens=NEW, do_sample=False, use_cache=True)
        plain = model.generate(greedy_ref[:, :PROMPT], max_new_tokens=NEW, do_sample=False, use_cache=False)
    assert torch.equal(cached, greedy_ref), (cached, greedy_ref)
    assert torch.equal(plain, greedy_ref)


@pytest.mark.dist
def test_router_unit_needs_the_codes(results: dict) -> None:
    """A char/word unit without the byte-level tokenizer is one error naming what is missing, at
    export and in the exported model; a KV cache the model did not route per unit is refused."""
    from transformers import DynamicCache

    from megatron_scale.convert import ConversionError, convert_megatron_to_hf

    root = results["root"]
    _, default = results["exported"]["route"]
    ids = results["mg"]["unit_ids"]
    with pytest.raises(ValueError, match="scale_router_unit 'char' needs scale_router_unit_codes"):
        default(ids, route_unit="char")
    with pytest.raises(ValueError, match="scale_router_unit 'syllable'"):
        default(ids, route_unit="syllable")
    with pytest.raises(ConversionError, match="router unit 'word' .*give --tokenizer"):
        convert_megatron_to_hf(root / "sc-route", root / "route-word-notok", route=RouterOverride(unit="word"))
    with pytest.raises(ConversionError, match="--route-unit: only a SCALE-Route"):
        convert_megatron_to_hf(root / "sc-adapt", root / "adapt-unit", route=RouterOverride(unit="char"))
    _, model = results["exported"]["route-char"]
    cache = DynamicCache()
    with torch.no_grad():
        model(ids[:, :4], cache=cache, route_unit="token")
        with pytest.raises(ValueError, match="continues a KV cache that no call routed per char"):
            model(ids[:, 4:5], cache=cache)


@pytest.mark.dist
@pytest.mark.parametrize("variant", ["preserve", "adapt"])
def test_fused_view_is_the_adaptation_head(results: dict, variant: str) -> None:
    """--fused-view: a Llama of the whole width whose logits are megatron-core's z_a and the SCALE
    export's adaptation head, whose greedy tokens are megatron-core's (z_a is a Preserve or Adapt
    model's default head), and --verify runs megatron-core's adaptation head against it."""
    summary, view = results["exported"][f"fused-{variant}"]
    _, scale = results["exported"][variant]
    mg = results["mg"]
    assert summary["kind"] == f"scale-{variant} fused view (adaptation head)"
    assert type(view).__name__ == "ScaleFusedLlamaForCausalLM"
    ids = _hf.tokens(seq=24)
    scale.config.scale_output_head = "adapt"
    try:
        with torch.no_grad():
            got, z_a = view(ids).logits, scale(ids).logits
    finally:
        scale.config.scale_output_head = "auto"
    assert _close(got, mg[f"{variant}/z_a"]) <= 1e-5 and _close(got, z_a) <= 1e-5
    ref = mg[f"{variant}/greedy"]
    with torch.no_grad():
        assert torch.equal(view.generate(ref[:, :PROMPT], max_new_tokens=NEW, do_sample=False), ref)
    if variant == "adapt":
        assert summary["verify_max_abs_error"] <= 1e-4


@pytest.mark.dist
def test_fused_view_is_refused_where_it_cannot_serve_the_model(results: dict, capsys: pytest.CaptureFixture) -> None:
    """Route (and its per-unit routing) and another head asked for are one error line naming the
    head the view would serve, before anything is written; the tool says it as one error line."""
    import sys

    from megatron_scale.convert import ConversionError, convert_megatron_to_hf

    root = results["root"]
    with pytest.raises(ConversionError, match=r"--fused-view: .*sc-route is SCALE-Route, whose router \(and per-unit "
                                              r"routing\) needs SCALE's own head; the fused view serves the adaptation "
                                              r"head z_a"):
        convert_megatron_to_hf(root / "sc-route", root / "fused-route", fused_view=True)
    with pytest.raises(ConversionError, match=r"--route-unit: only a SCALE-Route .* exported as its fused view \(z_a\)"):
        convert_megatron_to_hf(root / "sc-route", root / "fused-route", fused_view=True, route=RouterOverride(unit="char"))
    with pytest.raises(ConversionError, match="--fused-view and --preserve-head-only: choose one"):
        convert_megatron_to_hf(root / "sc-adapt", root / "fused-route", fused_view=True, preserve_head_only=True)
    with pytest.raises(ConversionError, match="--fused-view: .*mg-False is not a SCALE checkpoint"):
        convert_megatron_to_hf(root / "mg-False", root / "fused-route", fused_view=True)
    assert not (root / "fused-route").exists()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import convert_megatron_to_hf as tool

    assert tool.main(["--load", str(root / "sc-route"), "--save", str(root / "fused-route"), "--fused-view"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --fused-view:") and "adaptation head z_a" in err[0]


@pytest.mark.dist
def test_inference_bench_runs_on_the_three_exports(results: dict, tmp_path: Path) -> None:
    """tools/bench_inference.py on the base model, the SCALE export and the fused view (tiny, one
    repeat: it runs, nothing is timed here): a row each, and the FLOP model's counts hold: the base
    multiplies its linears and LM head, the fused view Preserve's absent W12 as zeros on top of what
    the SCALE export multiplies (m x n' per linear)."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import bench_inference

    root = results["root"]
    out = tmp_path / "bench.json"
    args = ["--model", f"base={root / 'hf-False'}", "--model", f"scale={root / 'hf-preserve'}",
            "--model", f"fused={root / 'fused-preserve'}", "--out", str(out), "--repeats", "1", "--new-tokens", "2",
            "--prompt-tokens", "4", "--threads", "1"]
    assert bench_inference.main(args) == 0
    torch.set_num_threads(1)
    result = json.loads(out.read_text())
    rows = {r["label"]: r for r in result["rows"]}
    assert list(rows) == ["base", "scale", "fused"] and rows["base"]["flop_ratio"] == 1.0
    assert all(r["tokens_per_s"] > 0 and r["per_token_ms"] is not None for r in rows.values())
    cfg = json.loads((root / "hf-preserve" / "config.json").read_text())
    L, d, du, k, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["scale_hidden_up"], cfg["head_dim"], cfg["vocab_size"]
    h, hu, g, f, fu = cfg["num_attention_heads"], cfg["scale_heads_up"], cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["scale_ffn_up"]
    base = L * ((h + 2 * g) * k * d + d * h * k + 3 * f * d) + V * d
    zeros = L * ((h + 2 * g) * k * du + d * hu * k + 2 * f * du + d * fu)
    context = 4 + 0.5
    attention = {name: 4 * heads * k * context * L / 1e9 for name, heads in (("base", h), ("scale", h + hu), ("fused", h + hu))}
    fused_weights = (rows["fused"]["matmul_gflops_per_token"] - attention["fused"]) * 1e9 / 2
    scale_weights = (rows["scale"]["matmul_gflops_per_token"] - attention["scale"]) * 1e9 / 2
    assert (rows["base"]["matmul_gflops_per_token"] - attention["base"]) * 1e9 / 2 == pytest.approx(base)
    assert fused_weights - scale_weights == pytest.approx(zeros)
    assert rows["fused"]["flop_ratio"] > rows["scale"]["flop_ratio"] > 1.0

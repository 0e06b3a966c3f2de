"""The vocabulary-splice control (megatron_scale/evaluation/splice.py, tools/vocab_splice.py), on
hand-made logits:

- the splice is the base's logits off the rows and the tuned model's on them, exactly, and its loss
  reduced per token to three numbers per model (Sides) equals the cross-entropy of the spliced
  logits computed directly (tokens on and off the rows, both);
- splice_run over a run's checkpoints writes a metrics.jsonl the frontier reads as a run's (iteration
  0 the base: learning 0, retention 1), whose bits per byte (reports/recipe.py bits_per_byte) equal
  -sum log2 p / bytes of the spliced distribution computed directly; English targets that are never
  rows score the base's numerators, so only the normaliser moves them; a checkpoint whose own loss
  is not the run's evaluation there (other windows) is one error naming it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from megatron_scale.evaluation.splice import sides, splice, splice_run, spliced_loss, window_sides
from megatron_scale.model.layers.output_rows import script_rows
from tests import _unit_vocab

V = 96  # the unit vocabulary's size: its Hangul bytes are rows, its ASCII is not


def test_the_splice_is_the_base_off_the_rows_and_the_tuned_model_on_them() -> None:
    g = torch.Generator().manual_seed(0)
    base, tuned = torch.randn(2, 5, 12, generator=g) * 3, torch.randn(2, 5, 12, generator=g) * 3
    rows = torch.zeros(12, dtype=torch.bool)
    rows[[2, 3, 7]] = True
    labels = torch.tensor([[2, 0, 7, 11, 3], [5, 3, 1, 2, 9]])  # on the rows and off them
    s = splice(base, tuned, rows)
    assert torch.equal(s[..., rows], tuned[..., rows]) and torch.equal(s[..., ~rows], base[..., ~rows])
    direct = F.cross_entropy(s.reshape(-1, 12).double(), labels.reshape(-1), reduction="none")
    b, t = sides(base, labels, rows), sides(tuned, labels, rows)
    assert torch.allclose(spliced_loss(b, t), direct, rtol=0, atol=1e-12)
    for model, own in ((base, b), (tuned, t)):  # each side alone is that model's own cross-entropy
        ce = F.cross_entropy(model.reshape(-1, 12).double(), labels.reshape(-1), reduction="none")
        assert torch.allclose(own.loss(), ce, rtol=0, atol=1e-12)
        assert not torch.allclose(direct, ce, atol=1e-3)  # the splice is neither model
    assert torch.allclose(spliced_loss(b, b), b.loss(), rtol=0, atol=1e-12)  # spliced with itself: the base
    assert t.label_on.tolist() == [True, False, True, False, True, False, True, False, True, False]
    for bad in (torch.zeros(12, dtype=torch.bool), torch.ones(12, dtype=torch.bool)):
        with pytest.raises(ValueError, match="rows on both sides"):
            sides(base, labels, bad)
    with pytest.raises(ValueError, match="other labels"):
        spliced_loss(b, sides(tuned, labels.flip(-1), rows))


def _model(seed: int, scale: float = 2.0):  # type: ignore[no-untyped-def]
    """A hand-made 'model': logits = a fixed table row per input token (a bigram model)."""
    table = torch.randn(V, V, generator=torch.Generator().manual_seed(seed)) * scale
    return lambda ids: table[ids]


def _ce(logits, ids) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return F.cross_entropy(logits(ids[:, :-1]).reshape(-1, V).double(), ids[:, 1:].reshape(-1), reduction="none")


@pytest.fixture()
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    pieces = _unit_vocab.pieces(V)
    tok = _unit_vocab.write_tokenizer(str(tmp_path / "tok"), pieces)
    rows = script_rows(pieces, V, "hangul")
    ko = torch.tensor(_unit_vocab.encode("한국어 문장 세계 한국어 장 " * 3, pieces)[:20]).view(2, 10)
    en = torch.tensor(_unit_vocab.encode("hello, the words of a world: aloud!", pieces)[:20]).view(2, 10)
    windows = {"EN": en, "KO": ko}
    monkeypatch.setattr("megatron_scale.evaluation.route_records.eval_windows",
                        lambda prefix, seq, samples, skip, seed, flag="": windows[prefix][:samples])
    models = {"base": _model(1), "iter_0000004": _model(2), "iter_0000008": _model(3)}
    folder = tmp_path / "train" / "full-seed1234"
    for name in ("iter_0000004", "iter_0000008"):
        (folder / name).mkdir(parents=True)
    (tmp_path / "base").mkdir()
    start = {"kind": "start", "iteration": 0, "method": "full", "seed": 1234, "eval_seed": 1234, "lr": 1e-4,
             "seq_length": 9, "global_batch_size": 2, "eval_iters": 1, "eval_data": {"en": "EN", "ko": "KO"}}
    lines = [start] + [{"kind": f"eval/{n}", "iteration": it, "lm_loss": float(_ce(models[m], windows[p]).mean())}
                       for it, m in ((0, "base"), (4, "iter_0000004")) for n, p in (("en", "EN"), ("ko", "KO"))]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    def score(load, wins, got_pieces, script, batch_size):  # type: ignore[no-untyped-def]
        assert got_pieces == pieces and script == "hangul"
        r = script_rows(got_pieces, V, script)
        return window_sides(models[Path(load).name], wins, r, batch_size), r

    return {"tmp": tmp_path, "folder": folder, "tok": tok, "score": score, "models": models, "windows": windows,
            "rows": rows, "pieces": pieces}


def test_a_spliced_run_is_a_frontier_run_with_the_direct_bits_per_byte(run: dict) -> None:
    from megatron_scale.reports.recipe import bits_per_byte
    from megatron_scale.run_metrics import evaluations
    from megatron_scale.reports.recipe_frontier import Spec, runs_of

    out = run["tmp"] / "splice"
    summary = splice_run(run["folder"], run["tmp"] / "base", run["tok"], out, score=run["score"], batch_size=1)
    assert summary["iterations"] == [0, 4, 8] and summary["rows"] == int(run["rows"].sum()) > 0
    metrics = out / "runs" / "full-seed1234" / "metrics.jsonl"
    evals = evaluations(metrics)
    assert sorted(evals) == [0, 4, 8] and json.loads(metrics.read_text().splitlines()[0])["splice"]["rows"] > 0
    rows, windows, models = run["rows"], run["windows"], run["models"]
    for it, ckpt in ((4, "iter_0000004"), (8, "iter_0000008")):
        for name, prefix in (("en", "EN"), ("ko", "KO")):
            ids = windows[prefix]
            z = splice(models["base"](ids[:, :-1]), models[ckpt](ids[:, :-1]), rows).double()
            logp = z.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
            n_bytes = sum(len(run["pieces"][i]) for i in ids[:, 1:].reshape(-1).tolist())
            direct = float(-logp.sum() / math.log(2) / n_bytes)
            rec = evals[it][name]
            assert bits_per_byte(rec, {"tokens": ids[:, 1:].numel(), "bytes": n_bytes}) == pytest.approx(direct, rel=1e-12)
            assert rec["tuned_lm_loss"] == pytest.approx(float(_ce(models[ckpt], ids).mean()), rel=1e-12)
            assert (rec["targets_on_rows"] == 0.0) == (name == "en") and ("run_lm_loss" in rec) == (it == 4)
    (curve,) = [r.curve for r in runs_of([Spec.parse(f"splice={out}:full:1e-4:1234")], "en", "ko")]
    assert curve[0] == (0.0, 1.0) and len(curve) == 3  # the base, then each checkpoint


def test_a_checkpoint_that_is_not_the_runs_evaluation_is_named(run: dict) -> None:
    models = run["models"]
    models["iter_0000004"] = _model(9)  # another model than the run evaluated at iteration 4
    with pytest.raises(ValueError, match="iter_0000004: en's loss"):
        splice_run(run["folder"], run["tmp"] / "base", run["tok"], run["tmp"] / "out", score=run["score"])
    with pytest.raises(ValueError, match=r"--iterations \[16\]: .* has no such checkpoint"):
        splice_run(run["folder"], run["tmp"] / "base", run["tok"], run["tmp"] / "out", iterations=[16],
                   score=run["score"])
    with pytest.raises(ValueError, match="--script latin"):
        splice_run(run["folder"], run["tmp"] / "base", run["tok"], run["tmp"] / "out", script="latin")

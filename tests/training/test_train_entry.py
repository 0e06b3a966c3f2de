"""The training entry, run as users run it: `torchrun -m megatron_scale.train` on CPU over gloo.

A tiny Llama-style base is pre-trained with --method full at TP=1 (10 iterations) and saved; then
- continuing it at TP=1, TP=2 and PP=2 gives the same losses (1e-5);
- at DP=2 the plain optimizer gives DP=1's losses and the distributed optimizer the plain one's
  (1e-5; the logged loss is the global batch's mean); TP=2 x DP=2 (4 ranks) trains;
- SCALE-Preserve continues from the base at TP=2 (killed with SIGKILL and resumed, every method
  reproduces its uninterrupted run exactly: tests/training/test_kills.py);
- after training, the Preserve model's preservation-head logits equal the base model's bitwise;
- --scale-local-linear planar (te_fused.py's composition over torch ops) trains Preserve's first
  three steps to its losses (fp32 rounding), and a fused run resumed from its checkpoint takes
  Preserve's fourth;
- SCALE-Route trains bitwise like SCALE-Preserve (losses, weights, optimizer state), evaluating on
  an --eval-iterations schedule and saving at --save-iterations;
- a NaN loss stops the run naming the iteration; --skip-nan skips the step instead;
- LLaMA-Pro's run starts at the base's loss and evaluates before its first step (what each method
  trains, and its first weights from a base, are tests/methods/test_build_and_load.py's);
- LoRA loaded from the base computes the base's logits bitwise at TP=1 and TP=2 with the same
  adapters at both; it trains at TP=2 as at TP=1 (1e-5), resumes from its checkpoint exactly, and
  its TP=2 checkpoint loads at TP=1; checkpoints with other LoRA settings are refused by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from tests._dist import run_ranks
from tests.methods._loading import EntryModel, loaded, lora_checks
from megatron_scale.testing.runs import RUN, command, losses, make_dataset, records, train

ITERS = 10
pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("train")
    en = make_dataset(root / "en", seed=0)
    ko = make_dataset(root / "ko", seed=1)
    base = train(1, root / "base.jsonl", "--method", "full", "--train-iters", str(ITERS), "--data-path", en,
                 "--save", str(root / "base"))
    return {"root": root, "en": en, "ko": ko, "base": base, "base_ckpt": str(root / "base" / f"iter_{ITERS:07d}")}


def _full(work: dict, name: str, nproc: int, *extra: str) -> dict[int, float]:
    return losses(train(nproc, work["root"] / f"{name}.jsonl", "--method", "full", "--train-iters", str(ITERS),
                        "--data-path", work["en"], *extra))


def test_base_pretraining_learns(work: dict) -> None:
    base = losses(work["base"])
    assert sorted(base) == list(range(1, ITERS + 1))
    assert base[ITERS] < base[1] - 0.3


def _cont(work: dict) -> tuple[str, ...]:
    return ("--load", work["base_ckpt"], "--data-path", work["ko"])


@pytest.fixture(scope="module")
def tp1_cont(work: dict) -> dict[int, float]:
    """The base continued with --method full at TP=1 on the Korean set."""
    return _full(work, "tp1_cont", 1, *_cont(work))


def test_tp2_and_pp2_match_tp1(work: dict, tp1_cont: dict) -> None:
    # Random init depends on the layout (each pipeline stage seeds its own layers), so every
    # layout continues from the same checkpoint.
    cont, base = _cont(work), tp1_cont
    # TP=2 with sequence parallelism: the plain model's norms run on sequence shards
    for name, extra in (("tp2", ("--tensor-model-parallel-size", "2", "--sequence-parallel")),
                        ("pp2", ("--pipeline-model-parallel-size", "2"))):
        got = _full(work, name, 2, *cont, *extra)
        assert sorted(got) == sorted(base), name
        for it in base:
            assert got[it] == pytest.approx(base[it], abs=1e-5), (name, it)


def test_distributed_optimizer_matches_plain_at_dp2(work: dict) -> None:
    plain = _full(work, "dp2", 2)
    distopt = _full(work, "dp2_distopt", 2, "--use-distributed-optimizer")
    dp1 = losses(work["base"])  # the same run (same init, same global batches) on one rank
    assert plain[ITERS] < plain[1]
    for it in plain:
        assert distopt[it] == pytest.approx(plain[it], abs=1e-5), it
        assert plain[it] == pytest.approx(dp1[it], abs=1e-5), it


def test_tp2_dp2_four_ranks_trains(work: dict) -> None:
    got = _full(work, "tp2dp2", 4, "--tensor-model-parallel-size", "2")
    assert got[ITERS] < got[1] - 0.2


PRESERVE_ITERS = 20


def _preserve_args(work: dict, save: Path) -> list[str]:
    return ["--method", "scale-preserve", "--train-iters", str(PRESERVE_ITERS), "--data-path", work["ko"],
            "--tensor-model-parallel-size", "2", "--sequence-parallel", "--load", work["base_ckpt"], "--save", str(save),
            "--save-interval", "5"]


@pytest.fixture(scope="module")
def preserve_run(work: dict) -> dict[str, Any]:
    save = work["root"] / "preserve"
    # also saved at 3, where the Route run below exits: the two are compared there
    recs = train(2, work["root"] / "preserve.jsonl", *_preserve_args(work, save), "--save-iterations", "3")
    return {"losses": losses(recs), "ckpt": str(save / f"iter_{PRESERVE_ITERS:07d}")}


@pytest.fixture(scope="module")
def route_exit(work: dict) -> dict[str, Any]:
    """SCALE-Route with Preserve's settings, stopped by --exit-interval 3, evaluated (routed) on a
    schedule (--eval-iterations 0 2 3) and saved at --save-iterations 2 too: one run for the two
    tests below."""
    root = work["root"]
    args = _preserve_args(work, root / "route")
    args[args.index("scale-preserve")] = "scale-route"
    recs = train(2, root / "route.jsonl", *args, "--exit-interval", "3", "--eval-data-path", f"en={work['en']}",
                 f"ko={work['ko']}", "--eval-iterations", "0", "2", "3", "--eval-iters", "1", "--save-iterations", "2")
    return {"records": recs, "save": root / "route", "metrics": root / "route.jsonl"}


def test_planar_local_linears_train_as_fused_does_and_resume_with_it(work: dict, preserve_run: dict) -> None:
    root, save = work["root"], work["root"] / "planar"
    args = _preserve_args(work, save)
    planar = losses(train(2, root / "planar.jsonl", *args, "--exit-interval", "3", "--scale-local-linear", "planar"))
    args[args.index("--load") + 1] = str(save)  # resumed at 3 with the default, fused.py: the same entries
    resumed = losses(train(2, root / "planar_resumed.jsonl", *args, "--exit-interval", "4"))
    want = preserve_run["losses"]
    assert sorted(planar) == [1, 2, 3] and sorted(resumed) == [4], (planar, resumed)
    assert all(v == pytest.approx(want[it], rel=1e-5) for it, v in {**planar, **resumed}.items()), (planar, resumed, want)
    assert want[1] - want[4] > 1e-3  # the steps compared move the loss


def test_exit_interval_saves_and_stops_on_the_schedule_of_the_whole_run(route_exit: dict, preserve_run: dict) -> None:
    """--exit-interval 3 (not a multiple of --save-interval 5): exits 0 after iteration 3 with a
    checkpoint there; the losses so far are the uninterrupted run's (--train-iters still fixes the
    LR schedule)."""
    assert (route_exit["save"] / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert losses(route_exit["records"]) == {it: preserve_run["losses"][it] for it in (1, 2, 3)}


def _tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint (the model's and the optimizer's), by key, as global values."""
    from megatron_scale.checkpoint.reader import MegatronReader

    reader = MegatronReader(ckpt)
    return {key: reader.get(key) for key in sorted(reader.meta)}


def test_route_trains_bitwise_like_preserve_on_an_evaluation_schedule(route_exit: dict, preserve_run: dict,
                                                                    work: dict) -> None:
    """SCALE-Route trains exactly as SCALE-Preserve (its router acts only in evaluation): the same
    losses, and after 3 steps the same weights and optimizer state bit for bit, so a router sweep
    of Preserve's checkpoints is Route's (issue 45). The Route run evaluates, routed, on a schedule
    (--eval-iterations 0 2 3) and saves at --save-iterations 2 too; its metrics start with the run's
    settings."""
    root, recs = work["root"], route_exit["records"]
    assert losses(recs) == {it: preserve_run["losses"][it] for it in range(1, 4)}  # floats compare exactly
    assert sorted(p.name for p in route_exit["save"].glob("iter_*")) == ["iter_0000002", "iter_0000003"]
    route, preserve = _tensors(route_exit["save"] / "iter_0000003"), _tensors(root / "preserve" / "iter_0000003")
    assert sorted(route) == sorted(preserve) and any(k.startswith("optimizer") for k in route)
    assert [k for k in route if not torch.equal(route[k], preserve[k])] == []
    evals = records(route_exit["metrics"], "eval/ko")
    assert [r["iteration"] for r in evals] == [0, 2, 3] and all("preserve_fraction" in r for r in evals)
    (start,) = records(route_exit["metrics"], "start")
    assert (start["method"], start["seed"], start["eval_iterations"], start["save_iterations"]) == (
        "scale-route", 1234, [0, 2, 3], [2])


def _compare_heads(rank: int, world: int, base_ckpt: str, scale_ckpt: str) -> dict[str, Any]:
    from megatron_scale.checkpoint import load_checkpoint
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.heads import output_head
    from tests import _tiny

    init_distributed(2, 1, device="cpu")
    base = loaded(base_ckpt, "full", 2)[0].to(_tiny.device()).eval()
    built = EntryModel("scale-preserve", 2)
    scale = built.build().to(_tiny.device()).eval()
    load_checkpoint(scale, scale_ckpt, method=built.method)
    b = _tiny.batch(seed=5)
    with torch.no_grad():
        ref = base(b["input_ids"], b["position_ids"], b["attention_mask"])
        with output_head(scale, "preserve"):
            z_p = scale(b["input_ids"], b["position_ids"], b["attention_mask"])
        z_a = scale(b["input_ids"], b["position_ids"], b["attention_mask"])
    return {"bitwise": torch.equal(z_p, ref), "adapted": float((z_a - ref).abs().max())}


def test_preservation_head_equals_base_after_training(work: dict, preserve_run: dict) -> None:
    assert preserve_run["losses"][PRESERVE_ITERS] < preserve_run["losses"][1]
    for r in run_ranks(_compare_heads, 2, work["base_ckpt"], preserve_run["ckpt"]):
        assert r["bitwise"]
        assert r["adapted"] > 1e-4


def test_nan_loss_stops_naming_the_iteration(work: dict) -> None:
    args = ["--method", "full", "--train-iters", "4", "--data-path", work["en"], "--lr", "1e30", "--lr-warmup-iters", "0",
            "--clip-grad", "0"]
    out = subprocess.run(command(1, "--metrics-file", str(work["root"] / "nan.jsonl"), *args),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    # one line (loop.main's RANK_ERRORS), naming the iteration
    ours = [line for line in out.stderr.splitlines() if line.startswith("error: iteration")]
    assert len(ours) == 1 and "lm loss is nan" in ours[0], out.stderr[-2000:]
    skipped = train(1, work["root"] / "nan_skip.jsonl", *args, "--skip-nan")
    assert len(skipped) == 4 and any(r["skipped"] for r in skipped)


@pytest.fixture(scope="module")
def pro_run(work: dict) -> dict[int, float]:
    return losses(train(1, work["root"] / "pro.jsonl", "--method", "llama-pro", "--llama-pro-blocks", "2",
                        "--train-iters", str(ITERS), *_cont(work), "--save", str(work["root"] / "pro"),
                        "--eval-data-path", f"en={work['en']}", f"ko={work['ko']}", "--eval-interval", str(ITERS),
                        "--eval-iters", "2"))


def test_eval_at_start_equals_a_zero_lr_evaluation(work: dict, pro_run: dict) -> None:
    """With --eval-interval a run evaluates before its first step: the LLaMA-Pro run's iteration-0
    record (its expanded model is the base function) equals one step of the base at LR 0 (the
    workaround the recipe used before), and its last evaluation moved away from it."""
    evals = records(work["root"] / "pro.jsonl", "eval/ko")
    assert [r["iteration"] for r in evals] == [0, ITERS]
    lr0 = work["root"] / "lr0.jsonl"
    train(1, lr0, "--method", "full", *_cont(work), "--train-iters", "1", "--lr", "0", "--lr-warmup-iters", "0",
          "--eval-data-path", f"en={work['en']}", f"ko={work['ko']}", "--eval-interval", "1", "--eval-iters", "2",
          "--no-eval-at-start")
    for name in ("en", "ko"):
        start, = [r for r in records(work["root"] / "pro.jsonl", f"eval/{name}") if r["iteration"] == 0]
        ref, = records(lr0, f"eval/{name}")
        assert ref["iteration"] == 1 and start["lm_loss"] == pytest.approx(ref["lm_loss"], abs=1e-6), (name, start, ref)
    assert evals[-1]["lm_loss"] < evals[0]["lm_loss"]


def test_llama_pro_continues_from_the_base(work: dict, tp1_cont: dict, pro_run: dict) -> None:
    """Through the entry: the expanded model starts at the base's loss on the same batch (it is
    the base function) and only its new blocks learn."""
    pro = pro_run
    assert pro[1] == pytest.approx(tp1_cont[1], abs=1e-6)
    assert pro[ITERS] < pro[1]


def test_sigterm_saves_and_exits_cleanly(work: dict) -> None:
    """Slurm pre-empts by sending SIGTERM to every task: the run finishes its iteration, saves
    (--exit-signal-save), writes the marker and exits 0."""
    save = work["root"] / "preempted"
    metrics = work["root"] / "preempted.jsonl"
    args = ["--method", "full", "--train-iters", "200", "--data-path", work["en"], "--save", str(save),
            "--exit-signal-save", "--metrics-file", str(metrics)]
    proc = subprocess.Popen(command(2, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 240
    while len(records(metrics)) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not start training"
        time.sleep(0.2)
    for worker in psutil.Process(proc.pid).children(recursive=True):
        worker.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    stopped = int((save / "latest_checkpointed_iteration.txt").read_text())
    assert 3 <= stopped < 200
    assert (save / f"iter_{stopped:07d}").is_dir()
    assert f"stopping at iteration {stopped} on a signal" in out


def test_pipeline_stage_with_nothing_trainable(work: dict) -> None:
    """Freeze at PP=2 with the whole first stage frozen (embedding, layers 0-1; the tied output
    copy on the last stage frozen with it) trains: no collective is left waiting."""
    got = losses(train(2, work["root"] / "freeze_pp2.jsonl", "--method", "freeze", "--freeze-layers", "2",
                       "--pipeline-model-parallel-size", "2", "--train-iters", "3", *_cont(work), timeout=120))
    assert sorted(got) == [1, 2, 3]


LORA_ITERS = 6


@pytest.fixture(scope="module")
def lora_runs(work: dict) -> dict[str, Any]:
    """--method lora from the base at TP=1 and at TP=2; the TP=2 run saves at iterations 3 and 6."""
    save = work["root"] / "lora"
    common = ("--method", "lora", "--train-iters", str(LORA_ITERS), *_cont(work))
    tp1 = losses(train(1, work["root"] / "lora_tp1.jsonl", *common))
    tp2 = losses(train(2, work["root"] / "lora_tp2.jsonl", *common, "--tensor-model-parallel-size", "2",
                       "--save", str(save), "--save-interval", "3"))
    return {"tp1": tp1, "tp2": tp2, "save": save, "ckpt": str(save / f"iter_{LORA_ITERS:07d}")}


def test_lora_tp2_matches_tp1_and_learns(lora_runs: dict) -> None:
    tp1, tp2 = lora_runs["tp1"], lora_runs["tp2"]
    assert sorted(tp1) == sorted(tp2) == list(range(1, LORA_ITERS + 1))
    for it in tp1:
        assert tp2[it] == pytest.approx(tp1[it], abs=1e-5), it
    assert tp2[LORA_ITERS] < tp2[1] - 0.05


def test_lora_resumes_exactly(work: dict, lora_runs: dict) -> None:
    """Megatron's marker names the checkpoint a run resumes from: pointed back at iteration 3, the
    run restores adapters, optimizer, scheduler and RNG there and reproduces iterations 4-6."""
    marker = lora_runs["save"] / "latest_checkpointed_iteration.txt"
    marker.write_text("3\n")
    try:
        resumed = losses(train(2, work["root"] / "lora_resumed.jsonl", "--method", "lora", "--train-iters",
                               str(LORA_ITERS), "--data-path", work["ko"], "--tensor-model-parallel-size", "2",
                               "--load", str(lora_runs["save"])))
    finally:
        marker.write_text(f"{LORA_ITERS}\n")
    assert sorted(resumed) == list(range(4, LORA_ITERS + 1))
    for it, value in resumed.items():
        assert value == lora_runs["tp2"][it], it


def test_lora_starts_at_the_base_and_its_checkpoints_reshard(work: dict, lora_runs: dict) -> None:
    for r in run_ranks(lora_checks, 2, work["base_ckpt"], lora_runs["ckpt"]):
        for tp in (1, 2):
            assert r[tp]["kind_base"] == "base+lora" and r[tp]["kind_lora"] == "lora", tp
            assert r[tp]["bitwise"], tp                   # B = 0: the base function, bitwise
            assert r[tp]["base_keys_kept"], tp            # base checkpoint keys unchanged
            assert len(r[tp]["lora_keys"]) == 8, r[tp]["lora_keys"]   # A, B of 4 linears, layers stacked
            assert r[tp]["moved"] > 1e-4, tp
        fresh = r[1]["fresh"]
        assert all(not v.any() for k, v in fresh.items() if k.endswith("lora_b"))
        assert all(v.abs().min() > 0 for k, v in fresh.items() if k.endswith("lora_a"))
        for key in ("fresh", "trained"):                  # the same global tensors at TP=1 and TP=2
            one, two = r[1][key], r[2][key]
            assert sorted(one) == sorted(two) and all(torch.equal(one[k], two[k]) for k in one), key
        assert float((r[1]["trained_logits"] - r[2]["trained_logits"]).abs().max()) < 1e-5
        assert "holds LoRA adapters" in r["into_full"] and "--method lora" in r["into_full"], r["into_full"]
        assert "--lora-alpha" in r["alpha"], r["alpha"]
        assert "--lora-rank" in r["rank"], r["rank"]
        assert r["dropout_eval_same"] and r["dropout_train_differs"]
        msg = r["other_shape"]
        assert msg.startswith(f"--load {work['base_ckpt']}: not a checkpoint of this base model") and "linear_fc" in msg, msg


def test_trained_runs_export_to_hugging_face(work: dict, preserve_run: dict, lora_runs: dict, pro_run: dict) -> None:
    """Every run checkpoint records its model arguments, so a run's --save directory exports as it
    is (its newest checkpoint), and --verify compares the exported model's logits with the
    checkpoint's: full (TP=1), SCALE-Preserve (saved at TP=2 with SP), LoRA (merged; the reference
    runs the unmerged adapters) and LLaMA-Pro (6 layers)."""
    from transformers import AutoConfig

    from megatron_scale.convert import convert_megatron_to_hf

    root = work["root"]
    expect = {"base": ("llama", 4), "preserve": ("scale-preserve", 4), "lora": ("llama (LoRA merged)", 4),
              "pro": ("llama", 6)}
    for run, (kind, layers) in expect.items():
        out = convert_megatron_to_hf(root / run, root / f"hf-{run}", verify=True, tolerance=1e-4, progress=False)
        assert out["kind"] == kind, (run, out)
        assert out["verify_max_abs_error"] < 1e-4, (run, out)
        cfg = AutoConfig.from_pretrained(root / f"hf-{run}", trust_remote_code=run == "preserve")
        assert cfg.num_hidden_layers == layers and cfg.vocab_size == 96 and cfg.rope_parameters["rope_theta"] == 10000, (run, cfg)
    # The merge is not a no-op: the trained adapters moved the function away from the base's.
    import safetensors.torch as st

    def tensor(folder: str, name: str) -> torch.Tensor:
        for f in sorted((root / folder).glob("*.safetensors")):
            t = st.load_file(f)
            if name in t:
                return t[name]
        raise KeyError(name)

    key = "model.layers.0.mlp.down_proj.weight"
    assert not torch.equal(tensor("hf-lora", key), tensor("hf-base", key))


def test_flags_must_match_the_loaded_models_arguments(work: dict) -> None:
    """--load records model arguments: they fill the flags left out, a flag describing another
    function is refused by name (before any model is built), and a resumed run's LR schedule
    cannot change (megatron-core's scheduler would only assert)."""

    from megatron_scale.training.config import parse
    from megatron_scale.checkpoint.records import read_records
    from megatron_scale.training.plan import FlagError, plan

    rec = read_records(work["base_ckpt"]).model_args
    assert rec is not None and rec["num_layers"] == 4 and rec["hidden_size"] == 64

    def checked(*extra: str, method: str = "scale-preserve", load: str = work["base_ckpt"]) -> Any:
        return plan(parse([*RUN, "--train-iters", "10", "--data-path", work["en"], "--method", method,
                           "--load", load, *extra]), 1)

    assert checked().record == rec
    assert checked("--llama-pro-blocks", "2", method="llama-pro").record["num_layers"] == 6
    for flags, named in ((("--rotary-base", "500000"), "--rotary-base"), (("--use-rope-scaling",), "--use-rope-scaling"),
                         (("--norm-epsilon", "1e-6"), "--norm-epsilon"), (("--num-query-groups", "4"), "--num-query-groups"),
                         (("--untie-embeddings-and-output-weights",), "--untie-embeddings-and-output-weights")):
        with pytest.raises(FlagError) as e:
            checked(*flags)
        assert str(e.value).startswith(f"--load {work['base_ckpt']}") and named in str(e.value), str(e.value)
    # resuming the base run (its --save directory): same schedule passes, another is refused by name
    run_dir = str(work["root"] / "base")
    checked("--lr-warmup-iters", "2", method="full", load=run_dir)
    for flags, named in ((("--lr", "1e-3"), "--lr"), (("--train-iters", "20"), "--train-iters"),
                         (("--lr-warmup-iters", "3"), "--lr-warmup-iters"), (("--global-batch-size", "16"), "--global-batch-size"),
                         (("--method", "scale-preserve"), "--method scale-preserve cannot resume it")):
        extra = flags[2:] if flags[0] == "--method" else flags
        with pytest.raises(FlagError, match=named):
            checked(*extra, method=flags[1] if flags[0] == "--method" else "full", load=run_dir)


def test_decoupled_lr_gives_the_expansion_tables_their_own_lr(work: dict, preserve_run: dict) -> None:
    """--decoupled-lr (megatron-core's decoupled LR): E_up and W_out_up, the trainable embedding and
    output parameters, at their own LR. At 0 they keep their zero init while the rest of the
    expansion learns (in the uninterrupted Preserve run they moved); the checkpoint records it and
    a resume with another is refused by name, before any step."""
    from megatron_scale.checkpoint.reader import MegatronReader

    save = work["root"] / "decoupled0"
    got = losses(train(1, work["root"] / "decoupled0.jsonl", "--method", "scale-preserve", "--train-iters", "4",
                       "--data-path", work["ko"], "--load", work["base_ckpt"], "--save", str(save),
                       "--decoupled-lr", "0"))
    assert sorted(got) == [1, 2, 3, 4] and len(set(got.values())) == 4  # the model still trains

    def tables(ckpt: Path | str) -> dict[str, torch.Tensor]:
        reader = MegatronReader(ckpt)
        return {k: reader.get(k) for k in ("embedding.word_embeddings.weight_up", "output_layer.weight_up")}

    frozen, trained = tables(save / "iter_0000004"), tables(preserve_run["ckpt"])
    for key in frozen:
        assert not frozen[key].any(), key  # still the zero init
        assert trained[key].abs().max() > 0, key
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    again = subprocess.run(command(1, "--method", "scale-preserve", "--train-iters", "4", "--data-path", work["ko"],
                                   "--load", str(save), "--save", str(save), "--decoupled-lr", "1e-3"),
                           capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode != 0
    said = [line for line in again.stderr.splitlines() if line.startswith("error:")]
    assert len(said) == 1 and "--decoupled-lr 0.0, not 0.001" in said[0], again.stderr[-3000:]
    assert sorted(p.name for p in save.iterdir() if p.name.startswith("iter_")) == ["iter_0000004"]

"""The logging rank's outputs: Megatron-style lines, the JSONL file, and TensorBoard events that
read back with TensorBoard's own reader to the same values."""

from __future__ import annotations

import json

from megatron_scale.training.metrics import MetricsLog


def test_lines_jsonl_and_tensorboard_agree(tmp_path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(active=True, jsonl=str(tmp_path / "m.jsonl"), tensorboard_dir=str(tmp_path / "tb"), train_iters=4)
    for i in (1, 2, 3):
        log.train_line(i, dict(consumed_samples=8 * i, step_time=0.25, lr=1e-3 / i, global_batch_size=8,
                               lm_loss=5.0 - i, grad_norm=0.5 * i, tokens_per_s=512.0))
    log.eval_line(3, {"en": {"lm_loss": 2.0, "ppl": 7.389}, "ko": {"lm_loss": 3.0, "ppl": 20.09, "preserve_fraction": 0.75}})
    log.close()
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith(" iteration        3/       4 | consumed samples:           24")
    for field in ("elapsed time per iteration (ms): 250.0", "learning rate: 3.333333E-04", "lm loss: 2.000000E+00",
                  "grad norm: 1.500", "tokens/s: 512", "ETA: "):
        assert field in out[2], field
    assert "ko routed to preservation head: 0.750" in out[3] and "en PPL: 7.3890E+00" in out[3]

    records = [json.loads(line) for line in open(tmp_path / "m.jsonl")]
    assert [r["iteration"] for r in records if r["kind"] == "train"] == [1, 2, 3]
    assert {r["kind"] for r in records} == {"train", "eval/en", "eval/ko"}

    ea = EventAccumulator(str(tmp_path / "tb"))
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("train/lm_loss")] == [(1, 4.0), (2, 3.0), (3, 2.0)]
    assert [(e.step, round(e.value, 6)) for e in ea.Scalars("eval/ko/preserve_fraction")] == [(3, 0.75)]


def test_inactive_ranks_write_nothing(tmp_path, capsys) -> None:
    log = MetricsLog(active=False, jsonl=str(tmp_path / "m.jsonl"), tensorboard_dir=str(tmp_path / "tb"), train_iters=2)
    log.train_line(1, {})
    log.close()
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []


def test_throughput_and_mfu_in_the_line_and_the_jsonl(tmp_path, capsys) -> None:
    """Megatron-LM's 'throughput per GPU (TFLOP/s/GPU)' and the MFU, each with its causal twin
    (training/throughput.py); absent where no FLOPs were counted, MFU only with --peak-tflops."""
    from megatron_scale.training.throughput import StepFlops

    rates = StepFlops(full=4e9, causal=3e9).rates(tokens=8192, seconds=0.5, gpus=2, peak_tflops=100.0)
    assert rates == {"tflops_per_gpu": 4e9 * 8192 / 0.5 / 2 / 1e12, "mfu": 4e9 * 8192 / 0.5 / 2 / 1e12 / 100.0,
                     "tflops_per_gpu_causal": 3e9 * 8192 / 0.5 / 2 / 1e12,
                     "mfu_causal": 3e9 * 8192 / 0.5 / 2 / 1e12 / 100.0}
    assert "mfu" not in StepFlops(full=4e9, causal=3e9).rates(tokens=8192, seconds=0.5, gpus=2, peak_tflops=None)
    log = MetricsLog(active=True, jsonl=str(tmp_path / "m.jsonl"), tensorboard_dir=None, train_iters=2)
    base = dict(consumed_samples=8, step_time=0.5, lr=1e-3, global_batch_size=8, lm_loss=2.0, grad_norm=0.5,
                tokens_per_s=16384.0)
    log.train_line(1, {**base, **rates})
    log.train_line(2, base)
    log.close()
    first, second = capsys.readouterr().out.splitlines()
    assert "| throughput per GPU (TFLOP/s/GPU): 32.8 (causal 24.6) | MFU: 0.328 (causal 0.246) |" in first, first
    assert "TFLOP/s" not in second
    rec = json.loads(open(tmp_path / "m.jsonl").readline())
    assert rec["tflops_per_gpu"] == rates["tflops_per_gpu"] and rec["mfu_causal"] == rates["mfu_causal"]

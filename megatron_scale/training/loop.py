"""The training run: megatron-core's DDP, optimizer, LR scheduler and pipeline schedules.

    setup -> (resume | initial weights) -> for each iteration: forward/backward over the
    microbatches of one global batch, optimizer step, log; evaluate and save on their intervals;
    on SIGTERM/SIGINT save if asked and leave the loop cleanly.
Frozen parameters never reach the grad buffers or the optimizer: megatron-core's DDP and
optimizer take only parameters that require grad.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale.checkpoint import latest_iteration_dir
from megatron_scale.distributed import destroy_distributed, init_distributed
from megatron_scale.model.builder import output_layers, router_settings
from megatron_scale.training import arguments as A
from megatron_scale.training.checkpointing import load_run, optimizer_metadata, save_run
from megatron_scale.training.data import build_datasets, microbatches
from megatron_scale.training.metrics import MetricsLog
from megatron_scale.training.model import adopt_router_default, build_model, load_initial_weights
from megatron_scale.training.model_args import recorded_model_args, run_model_args
from megatron_scale.training.preflight import FlagError, check_args


class StopTraining(RuntimeError):
    """The run cannot go on (a NaN loss without --skip-nan); the message names the iteration."""


@dataclass
class Run:
    args: argparse.Namespace
    model: Any
    ddp: Any
    optimizer: Any
    scheduler: Any
    data: Any
    log: MetricsLog
    num_microbatches: int
    dp_rank: int
    dp_size: int
    model_args: dict[str, Any]
    device: torch.device  # the run's one device: batches and collective buffers go here
    iteration: int = 0
    consumed: int = 0

    @property
    def optimizer_meta(self) -> dict[str, str]:
        return optimizer_metadata(self.args.use_distributed_optimizer)

    def save(self) -> None:
        save_run(self.args.save, self.iteration, self.ddp.module, self.optimizer, self.scheduler, self.consumed,
                 self.optimizer_meta, self.model_args)


def _forward_step(data: Any, model: Any) -> tuple[torch.Tensor, Any]:
    b = next(data)
    out = model(b["tokens"], b["position_ids"], b["attention_mask"], labels=b["labels"])
    mask = b["loss_mask"].float()

    def loss_func(per_token: torch.Tensor) -> tuple[torch.Tensor, dict]:
        loss = (per_token.float() * mask).sum() / mask.sum().clamp_min(1)
        # clone: the schedule divides the returned loss in place by the number of microbatches
        return loss, {"lm loss": loss.detach().clone()}

    return out, loss_func


def _mean_loss(outputs: list[dict], device: torch.device) -> torch.Tensor:
    """The global batch's mean loss, the same on every rank: averaged over this rank's
    microbatches (on the last stage), over data-parallel ranks, then broadcast down the pipeline
    (so every rank takes the same NaN decision). Summed on `device`, one host sync at the end."""
    value = torch.zeros(1, dtype=torch.float64, device=device)
    for o in outputs:
        value += o["lm loss"].to(device=device, dtype=torch.float64)
    if outputs:
        value /= len(outputs)
    ps = mc.parallel_state
    if ps.get_data_parallel_world_size() > 1:
        dist.all_reduce(value, group=ps.get_data_parallel_group())
        value /= ps.get_data_parallel_world_size()
    if ps.get_pipeline_model_parallel_world_size() > 1:
        last = ps.get_pipeline_model_parallel_last_rank()
        dist.broadcast(value, src=last, group=ps.get_pipeline_model_parallel_group())
    return value[0]


def _schedule(run: Run, data: Any, forward_only: bool) -> list[dict]:
    a = run.args
    return mc.get_forward_backward_func()(
        forward_step_func=_forward_step, data_iterator=data, model=[run.ddp],
        num_microbatches=run.num_microbatches, seq_length=a.seq_length,
        micro_batch_size=a.micro_batch_size, forward_only=forward_only,
    )


def setup(args: argparse.Namespace) -> Run:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    check_args(args, world)
    resume = latest_iteration_dir(args.load) if args.load else None
    source = resume or args.load
    model_args = run_model_args(args, recorded_model_args(source) if source else None,
                                where=f"--load {source}", resuming=resume is not None)
    if source:
        adopt_router_default(args, source)
    device = init_distributed(args.tensor_model_parallel_size, args.pipeline_model_parallel_size, seed=args.seed,
                              device=args.device)
    model = build_model(args).to(device)  # a no-op where megatron-core built it there already
    if args.load and resume is None:
        load_initial_weights(model, args.load)
    ddp = mc.DistributedDataParallel(
        model.config,
        mc.DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=args.use_distributed_optimizer),
        module=model,
    )
    optimizer = mc.get_megatron_optimizer(
        mc.OptimizerConfig(
            optimizer="adam", lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
            adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, clip_grad=args.clip_grad,
            bf16=args.bf16, params_dtype=model.config.params_dtype,
            use_distributed_optimizer=args.use_distributed_optimizer,
        ),
        [ddp],
    )
    gb = args.global_batch_size
    # Stepped by the global batch each iteration, so its horizons count samples (as Megatron-LM).
    scheduler = mc.OptimizerParamScheduler(
        optimizer, init_lr=0.0 if args.lr_warmup_iters else args.lr, max_lr=args.lr, min_lr=args.min_lr,
        lr_warmup_steps=args.lr_warmup_iters * gb, lr_decay_steps=(args.lr_decay_iters or args.train_iters) * gb,
        lr_decay_style=args.lr_decay_style, start_wd=args.weight_decay, end_wd=args.weight_decay,
        wd_incr_steps=args.train_iters * gb, wd_incr_style="constant",
    )
    model.config.finalize_model_grads_func = mc.finalize_model_grads
    ps = mc.parallel_state
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    data = build_datasets(
        blend=A.data_blend(args.data_path), split=args.split, eval_sets=A.eval_sets(args.eval_data_path),
        seq_length=args.seq_length, seed=args.seed, vocab_size=args.vocab_size,
        train_samples=args.train_iters * gb, eval_samples=max(args.eval_iters, 1) * gb, cache=args.data_cache_path,
    )
    logs_here = (
        ps.is_pipeline_last_stage() and ps.get_tensor_model_parallel_rank() == 0 and dp_rank == 0
    )
    metrics = args.metrics_file or (os.path.join(args.save, "metrics.jsonl") if args.save else None)
    run = Run(
        args=args, model=model, ddp=ddp, optimizer=optimizer, scheduler=scheduler, data=data,
        log=MetricsLog(active=logs_here, jsonl=metrics, tensorboard_dir=args.tensorboard_dir, train_iters=args.train_iters),
        num_microbatches=gb // (args.micro_batch_size * dp_size), dp_rank=dp_rank, dp_size=dp_size,
        model_args=model_args, device=device,
    )
    if resume is not None:
        run.iteration, run.consumed = load_run(resume, model, optimizer, scheduler, run.optimizer_meta)
    return run


def train_step(run: Run) -> dict[str, Any]:
    a = run.args
    start = time.monotonic()
    run.ddp.zero_grad_buffer()
    run.optimizer.zero_grad()
    data = microbatches(
        run.data.train, start_sample=run.consumed, micro_batch_size=a.micro_batch_size,
        num_microbatches=run.num_microbatches, dp_rank=run.dp_rank, dp_size=run.dp_size, device=run.device,
    )
    loss = float(_mean_loss(_schedule(run, data, forward_only=False), run.device))
    skipped = not math.isfinite(loss)
    if skipped and not a.skip_nan:
        raise StopTraining(f"iteration {run.iteration + 1}: lm loss is {loss}; stopping (--skip-nan skips such steps)")
    grad_norm = float("nan")
    if not skipped:
        ok, norm, _ = run.optimizer.step()
        grad_norm = float(norm) if norm is not None else float("nan")
        skipped = not ok
    run.scheduler.step(increment=a.global_batch_size)
    run.iteration += 1
    run.consumed += a.global_batch_size
    step_time = time.monotonic() - start
    return {
        "consumed_samples": run.consumed, "lm_loss": loss, "grad_norm": grad_norm, "skipped": skipped,
        "lr": run.optimizer.param_groups[0]["lr"], "global_batch_size": a.global_batch_size,
        "step_time": step_time, "tokens_per_s": a.global_batch_size * a.seq_length / step_time,
    }


def evaluate(run: Run) -> dict[str, dict[str, float]]:
    """Mean loss and perplexity per named set; for Route models, the share routed to z_p (with
    --route-tau / --route-statistic in place of the model's router settings where given)."""
    a = run.args
    run.ddp.eval()
    heads = output_layers(run.model)
    results = {}
    with torch.no_grad(), router_settings(run.model, a.route_tau, a.route_statistic):
        for name, ds in run.data.evals.items():
            for h in heads:
                h.reset_route_counts()
            losses = []
            for i in range(a.eval_iters):
                data = microbatches(
                    ds, start_sample=i * a.global_batch_size, micro_batch_size=a.micro_batch_size,
                    num_microbatches=run.num_microbatches, dp_rank=run.dp_rank, dp_size=run.dp_size,
                    device=run.device,
                )
                losses.append(float(_mean_loss(_schedule(run, data, forward_only=True), run.device)))
            loss = sum(losses) / len(losses)
            results[name] = {"lm_loss": loss, "ppl": math.exp(min(loss, 50.0))}
            if heads and heads[0].routed:
                results[name]["preserve_fraction"] = heads[0].preserve_fraction
    run.ddp.train()
    return results


class _Signals:
    """SIGTERM (Slurm pre-emption) and SIGINT set a flag; the loop stops at the next iteration
    boundary, all ranks together."""

    def __init__(self) -> None:
        self.received = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True

    def any_rank(self, device: torch.device) -> bool:
        """Whether any rank got a signal (an all-reduce over the default group: on `device`)."""
        flag = torch.tensor([1 if self.received else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def train(args: argparse.Namespace) -> Run:
    run = setup(args)
    signals = _Signals()
    first = run.iteration
    try:
        if args.eval_interval and args.eval_at_start and run.iteration == 0 and run.data.evals:
            run.log.eval_line(0, evaluate(run))  # the model as loaded: the "before" numbers
        while run.iteration < args.train_iters:
            values = train_step(run)
            if run.iteration % args.log_interval == 0:
                run.log.train_line(run.iteration, {**values, "start_iteration": first})
            if args.eval_interval and run.iteration % args.eval_interval == 0 and run.data.evals:
                run.log.eval_line(run.iteration, evaluate(run))
            last = run.iteration == args.train_iters
            stop = signals.any_rank(run.device)
            leave = bool(args.exit_interval) and run.iteration % args.exit_interval == 0 and not last
            if args.save and ((args.save_interval and run.iteration % args.save_interval == 0) or last
                              or (stop and args.exit_signal_save) or leave):
                run.save()
            if stop or leave:
                if run.log.active:
                    why = "on a signal" if stop else f"at --exit-interval {args.exit_interval}"
                    print(f" stopping at iteration {run.iteration} {why}", flush=True)
                break
    finally:
        run.log.close()
    return run


def main(argv: list[str] | None = None) -> None:
    args = A.parse_args(argv)
    try:
        train(args)
    except FlagError as e:  # raised alike on every rank, before any process group: say it once
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    finally:
        destroy_distributed()

"""The training run: megatron-core's DDP, optimizer, LR scheduler and pipeline schedules.

    setup -> (resume | initial weights: methods/load.py load_model) -> for each iteration:
    forward/backward over the microbatches of one global batch, optimizer step, log; evaluate and
    save on their intervals; on SIGTERM/SIGINT save if asked and leave the loop cleanly.
Frozen parameters never reach the grad buffers or the optimizer: megatron-core's DDP and
optimizer take only parameters that require grad.
"""

from __future__ import annotations

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
from megatron_scale import hooks
from megatron_scale.checkpoint.layout import SavedLayout, same_grid
from megatron_scale.checkpoint.records import CheckpointError
from megatron_scale.data.indexed import DatasetError
from megatron_scale.data.tokenizer import TokenFile
from megatron_scale.distributed import destroy_distributed, init_distributed
from megatron_scale.methods import TrainingMethod
from megatron_scale.methods.load import load_model
from megatron_scale.model.build import Kernels, Parallel, build_model
from megatron_scale.model.layers.heads import output_layers, router_settings
from megatron_scale.training.checkpointing import load_run, save_run
from megatron_scale.training.config import TrainConfig, parse
from megatron_scale.data.batches import build_datasets, microbatches
from megatron_scale.training.metrics import MetricsLog
from megatron_scale.training.optim import build_optimizer, build_scheduler, decoupled_record
from megatron_scale.training.plan import FlagError, Plan, plan
from megatron_scale.training.graphs import forward_backward_func, wrap_ddp
from megatron_scale.training.throughput import StepFlops, step_flops
from megatron_scale.training.say_once import say_error_once


class StopTraining(RuntimeError):
    """The run cannot go on (a NaN loss without --skip-nan); the message names the iteration."""


@dataclass
class Run:
    config: TrainConfig  # completed from --load (training/plan.py)
    model: Any
    ddp: Any
    optimizer: Any
    scheduler: Any
    data: Any
    log: MetricsLog
    num_microbatches: int
    dp_rank: int
    dp_size: int
    model_args: dict[str, Any]  # the architecture record the run's checkpoints carry
    layout: SavedLayout  # the layout record the run's checkpoints carry (checkpoint/layout.py)
    device: torch.device  # the run's one device: batches and collective buffers go here
    method: TrainingMethod  # the method the model was built for: what its checkpoints record
    iteration: int = 0
    consumed: int = 0
    forward_backward: Any = None  # the schedule (forward_backward_func, graphed with --cuda-graph-impl)
    flops: StepFlops | None = None  # FLOPs per token of a step (training/throughput.py)

    def save(self) -> None:
        save_run(self.config.checkpoint.save, self.iteration, self.ddp.module, self.optimizer, self.scheduler, self.consumed,
                 self.layout, self.model_args, decoupled_record(self.config.optim), method=self.method)


def _forward_step(data: Any, model: Any) -> tuple[torch.Tensor, Any]:
    b = next(data)
    out = model(b["tokens"], b["position_ids"], b["attention_mask"], labels=b["labels"])
    hooks.point("forward")
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
    s = run.config.schedule
    return (run.forward_backward or mc.get_forward_backward_func())(
        forward_step_func=_forward_step, data_iterator=data, model=[run.ddp],
        num_microbatches=run.num_microbatches, seq_length=s.seq_length,
        micro_batch_size=s.micro_batch_size, forward_only=forward_only,
    )


def _kernels(config: TrainConfig, device: torch.device) -> Kernels:
    m = config.model
    return Kernels(
        transformer_impl=m.transformer_impl, attention_backend=m.attention_backend, fp8_format=m.fp8_format,
        fp8_recipe=m.fp8_recipe, gradient_accumulation_fusion=m.gradient_accumulation_fusion, initialize=True,
        init_method_std=m.init_method_std, cpu_initialization=device.type == "cpu",
        te_linear=m.scale_te_linear or "modules", local_linear=m.scale_local_linear, fusions=m.fusions(), cuda_graph_impl=config.schedule.cuda_graph_impl,
    )


def setup(config: TrainConfig) -> Run:
    p: Plan = plan(config, int(os.environ.get("WORLD_SIZE", "1")))
    cfg, par, o, s = p.config, p.config.parallel, p.config.optim, p.config.schedule
    device = init_distributed(par.tp, par.pp, seed=s.seed, device=par.device)
    parallel, kernels = Parallel(tp=par.tp, pp=par.pp, sequence_parallel=par.sequence_parallel), _kernels(cfg, device)
    if p.initial is not None:  # the method's first weights (a base upscaled, grown, given adapters; its own)
        model = load_model(p.initial, parallel, device, method=p.method, args=p.architecture, kernels=kernels,
                           records=p.records).model
    else:
        model = build_model(p.architecture, p.method, parallel, kernels)
        model = model.to(device)  # a no-op where megatron-core built it there already
    _attach(model, p.method, cfg)
    ddp = wrap_ddp(model, par.use_distributed_optimizer, s.cuda_graph_impl)
    optimizer = build_optimizer(o, ddp, bf16=cfg.model.bf16, params_dtype=model.config.params_dtype,
                                distributed=par.use_distributed_optimizer)
    hooks.optimizer_built(optimizer)
    scheduler = build_scheduler(o, optimizer, train_iters=s.train_iters, global_batch_size=s.global_batch_size)
    gb = s.global_batch_size
    model.config.finalize_model_grads_func = mc.finalize_model_grads
    ps = mc.parallel_state
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    data = build_datasets(
        blend=cfg.data.blend(), split=cfg.data.split, eval_sets=cfg.data.evals(),
        seq_length=s.seq_length, seed=s.seed, eval_seed=cfg.data.eval_seed, vocab_size=p.architecture.vocab_size,
        train_samples=s.train_iters * gb, eval_samples=max(cfg.logging.eval_iters, 1) * gb,
        cache=cfg.data.data_cache_path,
    )
    logs_here = (
        ps.is_pipeline_last_stage() and ps.get_tensor_model_parallel_rank() == 0 and dp_rank == 0
    )
    log, save = cfg.logging, cfg.checkpoint.save
    metrics = log.metrics_file or (os.path.join(save, "metrics.jsonl") if save else None)
    run = Run(
        config=cfg, model=model, ddp=ddp, optimizer=optimizer, scheduler=scheduler, data=data,
        log=MetricsLog(active=logs_here, jsonl=metrics, tensorboard_dir=log.tensorboard_dir, train_iters=s.train_iters),
        num_microbatches=gb // (s.micro_batch_size * dp_size), dp_rank=dp_rank, dp_size=dp_size,
        model_args=p.record, layout=p.layout, device=device, method=p.method,
        forward_backward=forward_backward_func(s),
        flops=step_flops(model.config, p.architecture.vocab_size, s.seq_length, p.method),
    )
    if p.resume is not None:
        saved = p.resumed_layout or p.layout  # a checkpoint whose layout is unknown loads as the run's
        run.iteration, run.consumed = load_run(p.resume, model, optimizer, scheduler, saved.optimizer_format,
                                               rng=same_grid(p.resumed_layout, p.layout), records=p.records,
                                               method=p.method)
        run.log.record("resume", run.iteration, {"checkpoint": str(p.resume), "consumed_samples": run.consumed})
        if p.reshard and dist.get_rank() == 0:
            print(f" {p.reshard}", flush=True)
    return run


def _attach(model: Any, method: TrainingMethod, cfg: TrainConfig) -> None:
    """The method's model gets what it takes from --tokenizer-model (Scale: a Route model's per-token
    codes, so that evaluation can decide per character or word by its router unit or --route-unit;
    the scoped output rows): a tokenizer that cannot give them is one FlagError, before work."""
    try:
        notes = method.attach(model, TokenFile(cfg.model.tokenizer_model, "--tokenizer-model"), cfg.logging.route)
    except ValueError as e:
        raise FlagError(str(e)) from e
    if dist.get_rank() == 0:
        for note in notes:
            print(f" {note}", flush=True)


def train_step(run: Run) -> dict[str, Any]:
    a = run.config.schedule
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
    tokens = a.global_batch_size * a.seq_length
    rates = {} if run.flops is None else run.flops.rates(tokens, step_time, dist.get_world_size(),
                                                          run.config.logging.peak_tflops)
    return {
        "consumed_samples": run.consumed, "lm_loss": loss, "grad_norm": grad_norm, "skipped": skipped,
        "lr": run.optimizer.param_groups[0]["lr"], "global_batch_size": a.global_batch_size,
        "step_time": step_time, "tokens_per_s": tokens / step_time, **rates,
    }


def evaluate(run: Run) -> dict[str, dict[str, float]]:
    """Mean loss and perplexity per named set; for Route models, the share routed to z_p (with
    --route-tau / --route-statistic / --route-direction / --route-unit in place of the model's router
    settings where given)."""
    a, log = run.config.schedule, run.config.logging
    run.ddp.eval()
    heads = output_layers(run.model)
    results = {}
    with torch.no_grad(), router_settings(run.model, log.route):
        for name, ds in run.data.evals.items():
            for h in heads:
                h.reset_route_counts()
            losses = []
            for i in range(log.eval_iters):
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


def _start_record(run: Run) -> dict[str, Any]:
    """What a fresh run records before its first step (kind "start"): the settings a reader of its
    metrics needs to group and check runs (seeds, when it evaluates and saves)."""
    c = run.config
    return {"method": run.method.name, "seed": c.schedule.seed, "eval_seed": c.data.eval_seed,
            "lr": c.optim.lr, "train_iters": c.schedule.train_iters,
            "global_batch_size": c.schedule.global_batch_size, "seq_length": c.schedule.seq_length,
            "eval_iters": c.logging.eval_iters, "eval_interval": c.logging.eval_interval,
            "eval_iterations": list(c.logging.eval_iterations), "save_iterations": list(c.checkpoint.save_iterations),
            "eval_data": c.data.evals()}


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


def train(config: TrainConfig) -> Run:
    run = setup(config)
    s, log, ck = run.config.schedule, run.config.logging, run.config.checkpoint
    signals = _Signals()
    first = run.iteration
    try:
        if run.iteration == 0:
            run.log.record("start", 0, _start_record(run))
        if log.evaluates_at(0) and run.iteration == 0 and run.data.evals:
            run.log.eval_line(0, evaluate(run))  # the model as loaded: the "before" numbers
        while run.iteration < s.train_iters:
            values = train_step(run)
            if run.iteration % log.log_interval == 0:
                run.log.train_line(run.iteration, {**values, "start_iteration": first})
            if log.evaluates_at(run.iteration) and run.data.evals:
                run.log.eval_line(run.iteration, evaluate(run))
            last = run.iteration == s.train_iters
            stop = signals.any_rank(run.device)
            leave = bool(s.exit_interval) and run.iteration % s.exit_interval == 0 and not last
            if ck.save and ((ck.save_interval and run.iteration % ck.save_interval == 0) or last
                            or run.iteration in ck.save_iterations or (stop and ck.exit_signal_save) or leave):
                run.save()
            if stop or leave:
                if run.log.active:
                    why = "on a signal" if stop else f"at --exit-interval {s.exit_interval}"
                    print(f" stopping at iteration {run.iteration} {why}", flush=True)
                break
    finally:
        run.log.close()
    return run


# What a bad input raises once ranks run (a checkpoint whose frozen base changed, a dataset
# megatron-core refuses): printed as one line, like a FlagError. Anything else is a bug: traceback.
RANK_ERRORS = (CheckpointError, DatasetError, StopTraining)  # (training never imports convert/: house rule)


def main(argv: list[str] | None = None) -> None:
    """The entry: a bad input ends the run with one `error:` line and exit status 2, no traceback."""
    config = parse(argv)
    try:
        train(config)
    except (FlagError, *RANK_ERRORS) as e:  # on every rank or on some: the first to fail says it
        say_error_once(str(e), int(os.environ.get("WORLD_SIZE", "1")))
        sys.exit(2)
    finally:
        destroy_distributed()

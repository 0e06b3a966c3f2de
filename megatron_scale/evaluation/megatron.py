"""A Megatron checkpoint (or a training run's --save directory: its newest checkpoint) scored
through the project's own model at any TP x PP, with the same Scorer as a Hugging Face folder.

`evaluate_checkpoint` runs a Job on the ranks of the layout through launch.py's on_ranks,
as the conversion tools do: spawned here from a plain `python tools/...` call, or, inside a
process group (a torchrun/srun job, whose WORLD_SIZE > 1 starts one here), on that group's ranks.
Every rank builds its chunk of the model the checkpoint records (its architecture, SCALE geometry
or LoRA adapters: methods.recorded_method), loads it at this layout, and runs the same Job: the same batches in the same order, so the ranks meet in the
model's collectives. The last pipeline stage holds the logits (vocabulary gathered across TP
ranks); earlier stages score a stand-in and their numbers are dropped. The record of the first
rank of the last stage is the result, on every rank; extra data-parallel ranks repeat the work.

A SCALE model scores with the head `head` names: auto is what the recipe's evaluation and the
Hugging Face export use (z_a, the routed logits for SCALE-Route), or adapt, preserve, route.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from megatron_scale import _mcore as mc
from megatron_scale.evaluation.benchmarks import Scorer
from megatron_scale.evaluation.job import Job
from megatron_scale.model.layers.heads import HEADS
from megatron_scale.scale_config import Router


def _gather_vocab(logits: torch.Tensor) -> torch.Tensor:
    group = mc.parallel_state.get_tensor_model_parallel_group()
    tp = mc.parallel_state.get_tensor_model_parallel_world_size()
    if tp == 1:
        return logits
    parts = [torch.empty_like(logits) for _ in range(tp)]
    dist.all_gather(parts, logits.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


def model_logits(model: Any, ids: torch.Tensor, vocab: int, route_labels: bool = False) -> torch.Tensor:
    """[b, s, V] logits of ids [b, s] (one forward-only microbatch through megatron-core's
    schedule, so pipeline stages pass activations). On stages before the last: zeros, as an
    expanded view (no memory), which the caller's numbers from those ranks never reach.
    `route_labels`: a SCALE-Route model deciding per character or word is given the tokens each
    position predicts, as in training-time evaluation: ids shifted by one, and at the last position,
    whose target the scorer holds back, -1 (a special token: a unit of its own). That is what the
    Hugging Face export decides there per character, unless the text ends inside a UTF-8 character
    (then the export continues the character's unit); per word the export continues the open word."""
    from megatron_scale.model.inputs import causal_mask, position_ids

    b, s = ids.shape
    device = next(model.parameters()).device
    batch = {"ids": ids.to(device), "pos": position_ids(b, s, device), "mask": causal_mask(s, device)}
    extra = {"route_labels": torch.cat([batch["ids"][:, 1:], torch.full_like(batch["ids"][:, :1], -1)], dim=1)
             } if route_labels else {}

    def step(data: Any, m: Any) -> tuple[torch.Tensor, Any]:
        x = next(data)
        out = m(x["ids"], x["pos"], x["mask"], **extra)
        return out, lambda o: (torch.zeros((), device=o.device), {"logits": o.detach()})

    with torch.no_grad():
        out = mc.get_forward_backward_func()(
            forward_step_func=step, data_iterator=iter([batch]), model=[model], num_microbatches=1,
            seq_length=s, micro_batch_size=b, forward_only=True)
    if not mc.parallel_state.is_pipeline_last_stage():
        return torch.zeros((), device=device).expand(b, s, vocab)
    return _gather_vocab(out[0]["logits"])


def resolved_head(head: str, dims: Any, where: Path, router: Router | None = None) -> str | None:
    """The logits a checkpoint scores with: None for a plain model, else adapt | preserve | route.
    Any SCALE checkpoint routes with a `router` given: SCALE-Route trains bitwise like
    SCALE-Preserve, so a Preserve checkpoint routed is Route at that point of training."""
    if head not in HEADS:
        raise ValueError(f"--head {head}: choose one of {', '.join(HEADS)}")
    if dims is None:
        if head != "auto" or router is not None:
            raise ValueError(f"--head {head}: {where} is not a SCALE checkpoint (it has one output head)")
        return None
    route = dims.variant == "route"
    if router is not None and head != "route":
        raise ValueError(f"--router: only with --head route (got --head {head})")
    if head == "route" and not route and router is None:
        raise ValueError(f"--head route: {where} is SCALE-{dims.variant.capitalize()}, which records no router; "
                         "give one (--router STATISTIC:DIRECTION:TAU:UNIT)")
    return ("route" if route else "adapt") if head == "auto" else head


def parse_router(text: str) -> Router:
    """--router STATISTIC:DIRECTION:TAU:UNIT: a router to evaluate with instead of the checkpoint's
    (model/layers/heads.py router_settings)."""
    parts = text.split(":")
    try:
        stat, direction, tau, unit = parts[0], parts[1], float(parts[2]), parts[3]
    except (IndexError, ValueError):
        raise ValueError(f"--router {text!r}: expected STATISTIC:DIRECTION:TAU:UNIT, e.g. "
                         "max-prob:above:0.42:char") from None
    if len(parts) != 4:
        raise ValueError(f"--router {text!r}: expected STATISTIC:DIRECTION:TAU:UNIT")
    return Router(tau=tau, statistic=stat, direction=direction, unit=unit).check(lambda name: f"--router {name.upper()}")


def _rank(load: str, tokenizer: str, head: str, threads: int | None, job: Job, router: Router | None = None, *,
          device: torch.device) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from megatron_scale.data.tokenizer import TokenFile
    from megatron_scale.methods import Scale
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.model.layers.heads import router_settings

    if threads:
        torch.set_num_threads(threads)
    ps = mc.parallel_state
    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    tok = AutoTokenizer.from_pretrained(tokenizer, trust_remote_code=True)
    loaded = load_model(load, Parallel(tp=tp, pp=pp), device)  # a run directory: its newest checkpoint
    model, reader, method = loaded.model.eval(), loaded.reader, loaded.method
    used = resolved_head(head, method.scale_dims, reader.dir, router)
    with contextlib.ExitStack() as overrides:
        if router is not None:  # a context held for the whole evaluation (a bare __enter__() on the
            # temporary would be undone at once, when the temporary is freed)
            overrides.enter_context(router_settings(model, router))
            # any SCALE checkpoint routed is Route with that router (resolved_head)
            method = Scale(dims=dataclasses.replace(method.scale_dims, variant="route").with_router(router))
        if used == "route":
            method.attach(model, TokenFile(tokenizer))  # a router deciding per character or word: the tokenizer's codes
        return _scored(model, reader, tok, tokenizer, used, job, router, device)


def _scored(model: Any, reader: Any, tok: Any, tokenizer: str, used: str | None, job: Job, router: Router | None,
            device: torch.device) -> dict[str, Any]:
    """One rank's evaluation of the loaded model with its head (and router) chosen; the record
    that the reporting rank gathered."""
    from megatron_scale.model.layers.heads import output_head, output_layers

    ps = mc.parallel_state
    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    args = reader.model_args()
    if len(tok) > args.vocab_size:
        raise ValueError(f"--tokenizer {tokenizer}: {len(tok)} tokens, more than the checkpoint's "
                         f"vocabulary of {args.vocab_size}")
    per_unit = used == "route" and any(layer.router.unit != "token" for layer in output_layers(model))
    reports = (ps.is_pipeline_last_stage() and ps.get_tensor_model_parallel_rank() == 0
               and ps.get_data_parallel_rank() == 0)
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    scorer = Scorer(logits=lambda ids: model_logits(model, ids, args.vocab_size, per_unit), encode=tok.encode,
                    prefix_id=int(prefix), max_length=args.max_position_embeddings, decode=tok.decode)
    say = (lambda s: print(s, file=sys.stderr, flush=True)) if reports else (lambda s: None)
    if used is None:
        record = job.run(scorer, say)
    else:
        with output_head(model, used):
            record = job.run(scorer, say)
    record.update(checkpoint=str(reader.dir), head=used, tp=tp, pp=pp,
                  dtype=str(args.params_dtype), device=str(device))
    if router is not None:
        record["router"] = router.record()
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, record if reports else None)
    return next(r for r in everyone if r is not None)


def evaluate_checkpoint(load: str | Path, tokenizer: str | Path, job: Job, *, tp: int = 1, pp: int = 1,
                        head: str = "auto", threads: int | None = None, router: Router | None = None) -> dict[str, Any]:
    """Run `job` on the checkpoint (or run directory) `load` with the Hugging Face tokenizer
    `tokenizer`, at TP x PP: {"results", "text", "checkpoint", "head", "tp", "pp", "dtype", "device"}."""
    from megatron_scale.launch import on_ranks
    from megatron_scale.distributed import init_distributed

    if not Path(load).is_dir():
        raise FileNotFoundError(f"--load {load}: no such checkpoint or run directory")
    if not (Path(tokenizer) / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"--tokenizer {tokenizer}: not a Hugging Face tokenizer folder "
                                "(no tokenizer_config.json)")
    if head not in HEADS:
        raise ValueError(f"--head {head}: choose one of {', '.join(HEADS)}")
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        init_distributed(tp, pp, device="auto")  # launched by torchrun/srun: evaluate on the job's ranks
    return on_ranks(_rank, tp, pp, str(load), str(tokenizer), head, threads, job, router)[0]

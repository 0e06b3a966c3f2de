"""Adam and its learning-rate schedule: megatron-core's optimizer (distributed or not, over the
DDP buffers) and OptimizerParamScheduler, configured by OptimConfig (--lr, --min-lr, ...).

The scheduler is stepped by the global batch each iteration, so its horizons count samples, as in
Megatron-LM: a resumed run's schedule is the checkpoint's (training/plan.py refuses a change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from megatron_scale import _mcore as mc
from megatron_scale.flags import flag, positive


@dataclass(kw_only=True)
class OptimConfig:
    """Adam, its learning-rate schedule (megatron-core's OptimizerParamScheduler) and clipping."""

    lr: float = field(default=0.0, metadata=flag("--lr", required=True))
    """Peak learning rate."""
    min_lr: float = field(default=0.0, metadata=flag("--min-lr"))
    """The LR the decay ends at."""
    lr_decay_style: str = field(default="cosine", metadata=flag("--lr-decay-style", choices=("constant", "linear", "cosine")))
    """How the LR decays after warm-up."""
    lr_warmup_iters: int = field(default=0, metadata=flag("--lr-warmup-iters"))
    """Iterations of linear warm-up from 0."""
    lr_decay_iters: int | None = field(default=None, metadata=flag("--lr-decay-iters"))
    """The decay's horizon (default: --train-iters)."""
    weight_decay: float = field(default=0.0, metadata=flag("--weight-decay"))
    """AdamW weight decay."""
    clip_grad: float = field(default=1.0, metadata=flag("--clip-grad"))
    """Gradient-norm clipping."""
    adam_beta1: float = field(default=0.9, metadata=flag("--adam-beta1"))
    """Adam beta1."""
    adam_beta2: float = field(default=0.95, metadata=flag("--adam-beta2"))
    """Adam beta2."""
    decoupled_lr: float | None = field(default=None, metadata=flag("--decoupled-lr"))
    """Peak LR of the trainable embedding and output parameters (megatron-core's decoupled LR; for
    SCALE the expansion tables E_up and W_out_up, the only way a Preserve model changes its
    output). Default: --lr."""
    decoupled_min_lr: float | None = field(default=None, metadata=flag("--decoupled-min-lr"))
    """The LR the decoupled LR decays to (default: --min-lr)."""

    def validate(self, train_iters: int) -> None:
        """What megatron-core's scheduler only asserts on: warm-up below the decay horizon, min LR <= LR."""
        positive(("--lr-decay-iters", self.lr_decay_iters))
        if self.lr < 0 or self.min_lr < 0:
            raise ValueError(f"--lr {self.lr} / --min-lr {self.min_lr}: learning rates must be >= 0")
        if self.min_lr > self.lr:
            raise ValueError(f"--min-lr {self.min_lr} is above --lr {self.lr}")
        if self.decoupled_min_lr is not None and self.decoupled_lr is None:
            raise ValueError("--decoupled-min-lr needs --decoupled-lr")
        if self.decoupled_lr is not None:
            low = self.min_lr if self.decoupled_min_lr is None else self.decoupled_min_lr
            if self.decoupled_lr < 0 or low < 0 or low > self.decoupled_lr:
                raise ValueError(f"--decoupled-lr {self.decoupled_lr} / --decoupled-min-lr {low}: must be >= 0, "
                                 "the minimum not above the peak")
        if self.lr_warmup_iters < 0:
            raise ValueError(f"--lr-warmup-iters {self.lr_warmup_iters}: must be >= 0")
        horizon = ("--lr-decay-iters", self.lr_decay_iters) if self.lr_decay_iters else ("--train-iters", train_iters)
        if self.lr_warmup_iters >= horizon[1]:
            raise ValueError(f"--lr-warmup-iters {self.lr_warmup_iters} must be below {horizon[0]} {horizon[1]} "
                             "(warm-up ends before the LR decays)")
        if self.weight_decay < 0 or self.clip_grad < 0:
            raise ValueError(f"--weight-decay {self.weight_decay} / --clip-grad {self.clip_grad}: must be >= 0")
        for name, beta in (("--adam-beta1", self.adam_beta1), ("--adam-beta2", self.adam_beta2)):
            if not 0 <= beta < 1:
                raise ValueError(f"{name} {beta}: must lie in [0, 1)")


def build_optimizer(config: OptimConfig, ddp: Any, *, bf16: bool, params_dtype: torch.dtype, distributed: bool) -> Any:
    """megatron-core's Adam over the DDP module's trainable parameters (frozen ones never reach it)."""
    return mc.get_megatron_optimizer(
        mc.OptimizerConfig(
            optimizer="adam", lr=config.lr, min_lr=config.min_lr, weight_decay=config.weight_decay,
            adam_beta1=config.adam_beta1, adam_beta2=config.adam_beta2, clip_grad=config.clip_grad,
            bf16=bf16, params_dtype=params_dtype, use_distributed_optimizer=distributed,
            decoupled_lr=config.decoupled_lr,
            decoupled_min_lr=config.min_lr if config.decoupled_min_lr is None and config.decoupled_lr is not None
            else config.decoupled_min_lr,
        ),
        [ddp],
    )


def decoupled_record(config: OptimConfig) -> dict[str, float | None]:
    """What a run checkpoint records of the decoupled LR, so a resume can refuse a change
    (megatron-core restores each parameter group's LR from the checkpoint, not from the flags)."""
    low = config.min_lr if config.decoupled_min_lr is None and config.decoupled_lr is not None else config.decoupled_min_lr
    return {"decoupled_lr": config.decoupled_lr, "decoupled_min_lr": low}


def build_scheduler(config: OptimConfig, optimizer: Any, *, train_iters: int, global_batch_size: int) -> Any:
    """Warm-up then decay over --lr-decay-iters (default --train-iters), in samples."""
    gb = global_batch_size
    return mc.OptimizerParamScheduler(
        optimizer, init_lr=0.0 if config.lr_warmup_iters else config.lr, max_lr=config.lr, min_lr=config.min_lr,
        lr_warmup_steps=config.lr_warmup_iters * gb, lr_decay_steps=(config.lr_decay_iters or train_iters) * gb,
        lr_decay_style=config.lr_decay_style, start_wd=config.weight_decay, end_wd=config.weight_decay,
        wd_incr_steps=train_iters * gb, wd_incr_style="constant",
    )

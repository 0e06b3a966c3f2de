"""`tools/route_sweep.py`'s work: a SCALE checkpoint and an old-domain and a new-domain eval set
in, every router statistic's trade-off out (sweep.json, sweep.png), from one forward pass per
window at the checkpoint's model, TP ranks spawned as the conversion tools spawn them (PP = 1).
Optionally a calibrated direction and tau (route_eval/calibrate.py), written as the router default
of a new checkpoint (--save), which training, evaluation and the HF export then use (with the
first --route-units unit as the router's unit, which needs --route-pool first: the model's pooling). With
--route-units the statistics are also pooled per character or word (route_eval/units.py) from
the same records: the first unit is the sweep's, the others are summarised under "by_unit".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from megatron_scale.artifacts import SWEEP, SWEEP_PLOT
from megatron_scale.route_stats.statistics import STATISTICS
from megatron_scale.route_eval.calibrate import check_share
from megatron_scale.route_eval.units import POOLS, UNITS
from megatron_scale.scale_config import Router


@dataclass(kw_only=True)
class SweepSettings:
    load: str
    old: tuple[str, str]  # (name, dataset prefix)
    new: tuple[str, str]
    out: str
    seq_length: int
    samples: int
    batch_size: int = 4
    tp: int = 1
    statistics: tuple[str, ...] = STATISTICS
    taus: tuple[float, ...] | None = None
    keep_old: float | None = None
    min_new_adapt: float | None = None
    calibrate_with: str = "cosine"
    direction: str = "auto"  # auto: each statistic's calibration (or AUC) picks; above | below: imposed
    units: tuple[str, ...] = ("token",)  # routing units (units.py); the first is the sweep's
    pool: str = "mean"  # how a unit's statistic is pooled: mean | first
    tokenizer: str | None = None  # byte-level BPE tokenizer.json (units other than token need it)
    calibration_old: str | None = None  # held-out prefixes for calibration (default: the eval sets)
    calibration_new: str | None = None
    calibration_skip: int = 0  # calibration windows start after this many (disjoint from the evaluated ones)
    alphas: tuple[float, ...] = ()  # also score z_p + alpha (z_a - z_p) at these (the global-weight control)
    save: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What sweep.json records under "settings" (the recipe reads it to skip a done sweep)."""
        return {k: v for k, v in vars(self).items() if k != "extra"}

    def check(self) -> None:
        for flag, value in (("--seq-length", self.seq_length), ("--samples", self.samples),
                            ("--batch-size", self.batch_size), ("--tensor-model-parallel-size", self.tp)):
            if value < 1:
                raise ValueError(f"{flag}: must be at least 1, got {value}")
        bad = [s for s in self.statistics if s not in STATISTICS]
        if bad:
            raise ValueError(f"--statistics: unknown {bad}; choose from {', '.join(STATISTICS)}")
        if self.direction not in ("auto", "above", "below"):
            raise ValueError(f"--direction: unknown {self.direction!r}; choose auto, above or below")
        bad_units = [u for u in self.units if u not in UNITS]
        if bad_units or not self.units:
            raise ValueError(f"--route-units: unknown {bad_units}; choose from {', '.join(UNITS)}")
        if self.pool not in POOLS:
            raise ValueError(f"--route-pool: unknown {self.pool!r}; choose one of {', '.join(POOLS)}")
        if any(u != "token" for u in self.units) and self.tokenizer is None:
            raise ValueError("--route-units char/word need --tokenizer (the byte-level BPE the data was tokenized with)")
        if self.save is not None and self.units[0] != "token" and self.pool != "first":
            raise ValueError(f"--save: a model routing per {self.units[0]} decides by the unit's first token; a tau "
                             f"calibrated on the {self.pool} of a unit (--route-pool) is not its router's; use "
                             "--route-pool first, or put token first in --route-units")
        if self.calibrate_with not in self.statistics:
            raise ValueError(f"--calibrate-with {self.calibrate_with!r} is not among --statistics {list(self.statistics)}")
        if self.save is not None and self.keep_old is None:
            raise ValueError("--save writes the calibrated tau: it needs --keep-old")
        if (self.calibration_old is None) != (self.calibration_new is None):
            raise ValueError("--calibration-old-data and --calibration-new-data go together")
        if self.keep_old is None and (self.min_new_adapt is not None or self.calibration_old is not None):
            raise ValueError("--min-new-adapt and --calibration-*-data need --keep-old")
        if self.calibration_skip < 0:
            raise ValueError(f"--calibration-skip: must be at least 0, got {self.calibration_skip}")
        if self.calibration_skip and self.calibration_old is None:
            raise ValueError("--calibration-skip needs --calibration-old-data and --calibration-new-data")
        for flag, cal, (_, evaluated), eval_flag in (("--calibration-old-data", self.calibration_old, self.old, "--old-data"),
                                                     ("--calibration-new-data", self.calibration_new, self.new, "--new-data")):
            if cal is not None and _same(cal, evaluated) and self.calibration_skip < self.samples:
                raise ValueError(f"{flag} is {eval_flag}'s set: its windows overlap the evaluated ones unless "
                                 f"--calibration-skip >= --samples ({self.samples}); leave the --calibration-* "
                                 "flags out to calibrate on the evaluated windows themselves")
        check_share("--keep-old", self.keep_old)
        check_share("--min-new-adapt", self.min_new_adapt)
        if not os.path.isdir(self.load):
            raise ValueError(f"--load: checkpoint directory {self.load} does not exist")


def _same(a: str, b: str) -> bool:
    """Two dataset prefixes naming the same files."""
    return os.path.realpath(a) == os.path.realpath(b)


def _check_scale(load: str) -> None:
    """Refuse, before any rank starts, a checkpoint that holds no SCALE model."""
    from megatron_scale.checkpoint.reader import MegatronReader
    from megatron_scale.methods import recorded_method

    if recorded_method(MegatronReader(load).records).scale_dims is None:
        raise ValueError(f"--load {load}: not a SCALE checkpoint (route sweeps need both heads)")


def _records_rank(s: SweepSettings, sets: dict[str, torch.Tensor], *, device: torch.device) -> dict[str, dict[str, torch.Tensor]]:
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.evaluation.capture import collect
    from megatron_scale.data.windows import batches

    model = load_model(s.load, Parallel(tp=s.tp), device).model.eval()
    return {name: collect(model, batches(ids.to(device), s.batch_size), s.statistics, s.alphas)
            for name, ids in sets.items()}


def _save_rank(load: str, save: str, tp: int, router: Router, *, device: torch.device) -> str:
    from megatron_scale.checkpoint.io import save_checkpoint
    from megatron_scale.methods import Scale
    from megatron_scale.methods.load import load_model
    from megatron_scale.model.build import Parallel
    from megatron_scale.model.layers.heads import set_router_default

    loaded = load_model(load, Parallel(tp=tp), device)
    model = loaded.model.eval()
    set_router_default(model, router)
    # the geometry with its new router default is what the checkpoint records
    return str(save_checkpoint(model, save, method=Scale(dims=model.scale_dims), model_args=loaded.reader.model_args().to_json()))


def run_sweep(s: SweepSettings) -> dict[str, Any]:
    from megatron_scale.launch import on_ranks
    from megatron_scale.route_eval.analysis import analyse
    from megatron_scale.route_eval.report import plot, write_json
    from megatron_scale.data.tokenizer import token_bytes
    from megatron_scale.route_eval.units import pooled_records
    from megatron_scale.data.windows import windows

    s.check()
    _check_scale(s.load)
    sets = {"old": windows(s.old[1], s.seq_length, s.samples, flag="--old-data"),
            "new": windows(s.new[1], s.seq_length, s.samples, flag="--new-data")}
    if s.calibration_old is not None:
        sets["cal_old"] = windows(s.calibration_old, s.seq_length, s.samples, skip=s.calibration_skip,
                                  flag="--calibration-old-data")
        sets["cal_new"] = windows(s.calibration_new, s.seq_length, s.samples, skip=s.calibration_skip,
                                  flag="--calibration-new-data")
    per_token = on_ranks(_records_rank, s.tp, 1, s, sets)[0]
    pieces = token_bytes(s.tokenizer) if s.tokenizer is not None else []

    def analysed(unit: str) -> dict[str, Any]:
        rec = {k: pooled_records(v, sets[k][:, 1:], pieces, unit, s.pool) for k, v in per_token.items()}
        cal_sets = (rec["cal_old"], rec["cal_new"]) if "cal_old" in rec else None
        return analyse((s.old[0], rec["old"]), (s.new[0], rec["new"]), s.statistics, "ppl", taus=s.taus,
                       keep_old=s.keep_old, min_new_adapt=s.min_new_adapt, calibration_sets=cal_sets,
                       direction=None if s.direction == "auto" else s.direction)

    results = analysed(s.units[0])
    results["unit"] = s.units[0]
    results["by_unit"] = {u: {stat: {k: v for k, v in r.items() if k not in ("points", "roc")}
                              for stat, r in analysed(u)["statistics"].items()} for u in s.units[1:]}
    results["settings"] = s.record()
    summary: dict[str, Any] = {
        "auc": {k: v["auc"] for k, v in results["statistics"].items()},  # the paper's direction (above)
        "direction": {k: v["direction"] for k, v in results["statistics"].items()},
        "auc_in_direction": {k: v["auc_by_direction"][v["direction"]] for k, v in results["statistics"].items()},
        "heads": results["heads"], "unit": s.units[0],
        "auc_in_direction_by_unit": {u: {k: v["auc_by_direction"][v["direction"]] for k, v in r.items()}
                                     for u, r in results["by_unit"].items()}}
    if s.keep_old is not None:
        cal = results["statistics"][s.calibrate_with]["calibration"]
        summary["calibration"] = cal
        if s.save is not None:
            router = Router(tau=cal["tau"], statistic=s.calibrate_with, direction=cal["direction"], unit=s.units[0])
            results["saved"] = summary["saved"] = on_ranks(_save_rank, s.tp, 1, s.load, s.save, s.tp, router)[0]
    Path(s.out).mkdir(parents=True, exist_ok=True)
    summary["json"], summary["plot"] = os.path.join(s.out, SWEEP.name), os.path.join(s.out, SWEEP_PLOT.name)
    write_json(summary["json"], results)
    plot(results, summary["plot"])
    return summary

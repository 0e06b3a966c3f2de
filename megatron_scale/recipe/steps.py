"""The Korean recipe's steps, as data: what each step runs, and what it skips because it is done.

    [prepare the demo model] -> data -> [pre-train the tiny base | convert the HF base]
         -> per method: [upscale] -> train [-> scale-route: sweep its router over every tau]
         -> evaluate: held-out bytes [, benchmarks of the base and every method], the report
         -> per method: export to HF [-> lm-eval]

`actions(settings)` lists every action in order, each a step title and a `resolve()` that looks at
$WORKDIR when called and returns either a message (done: skipped) or a Command. The list itself
never depends on $WORKDIR, so the launcher (examples/scale_korean.sh) can ask for action k, run it,
and ask for k+1: each decision sees what the actions before it wrote. That is how a requeued job
resumes: finished datasets, conversions, upscalings, runs and exports are skipped, and the
interrupted run continues from `--load` of its own save directory.

Each action also names what it writes (`key`, its lock in $WORKDIR/locks: the launcher decides
and runs it under that lock, so jobs sharing a WORKDIR never do one action twice at once) and
the job of an ARRAY=1 submission that runs it (`part`: "prepare", its method, or "report";
megatron_scale.recipe.array).

A Command is "single" (one process: `python SCRIPT ARGS`, which may start its own ranks) or
"train" (`python -m megatron_scale.train ARGS` on every rank); how either is launched (srun,
torchrun, a container) is the launcher's business.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from megatron_scale.recipe.array import why_missing
from megatron_scale.recipe.settings import Settings, SettingsError, demo_raw

LATEST = "latest_checkpointed_iteration.txt"
EVAL_SEED = 1234  # training's default --seed: a run with SEED evaluates the windows an unseeded run does


@dataclass(kw_only=True, frozen=True)
class Command:
    """One process (or one set of ranks) to launch."""

    kind: Literal["single", "train"]
    """single: `python ARGS...`; train: `python -m megatron_scale.train ARGS...` on every rank."""
    args: tuple[str, ...]
    """The arguments after the python (single) or after the module (train)."""
    note: str = ""
    """Said before launching (a run that resumes: from which iteration)."""


@dataclass(kw_only=True, frozen=True)
class Action:
    """One thing a step does; `resolve()` decides, when called, whether it is already done."""

    step: int
    """1-based number of the step it belongs to (a step may hold several actions)."""
    title: str
    """The step's title, printed before its first action."""
    resolve: Callable[[], Command | str]
    """A Command to run, or a message saying why nothing needs running."""
    key: str
    """What it writes, as a lock name ($WORKDIR/locks/KEY.lock): one job at a time decides and runs it."""
    part: str
    """The job of an ARRAY=1 submission that runs it: "prepare", its method, or "report"."""
    work: Callable[[], int] = lambda: 1
    """Its work left, for the estimate of time left (recipe/progress.py): a training's iterations
    still to run, 1 for anything else."""


def done_iters(run: Path) -> int:
    """Iterations a training run has saved (0 before its first checkpoint)."""
    try:
        return int((run / LATEST).read_text().strip())
    except FileNotFoundError:
        return 0


def last_ckpt(run: Path) -> Path:
    return run / f"iter_{done_iters(run):07d}"


class Recipe:
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
            self.extra_raw = dict(item.split("=", 1) for item in s.extra_eval)
            self.extra = {name: d / f"{name}_eval_text_document" for name in self.extra_raw}

    def run_dir(self, method: str) -> Path:
        """A method's continued run ($WORKDIR/runs/METHOD, or METHOD-seedSEED with SEED)."""
        return self.s.workdir / "runs" / run_name(method, self.s.seed)

    def base(self) -> Path:
        """The checkpoint every method starts from (the tiny base's newest, or the converted one)."""
        return last_ckpt(self.base_run) if self.s.from_scratch else self.converted

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

    # ---- the steps: (title, [resolve, ...]) --------------------------------------------------
    def data(self) -> list[tuple[str, Callable[[], Command | str]]]:
        """(lock key, resolve) of each dataset."""
        s = self.s
        if s.from_scratch:
            def demo() -> Command | str:
                if all(Path(f"{p}.idx").is_file() for p in (self.ko_eval, *self.extra.values())):
                    return f"demo corpora ready in {s.data_dir}"
                return _single("tools/prepare_demo_data.py", "--output-dir", s.data_dir)
            return [("data", demo)]
        sources = ((self.ko_train, s.ko_train_input), (self.ko_eval, s.ko_eval_input), (self.en_eval, s.en_eval_input),
                   *((self.extra[name], raw) for name, raw in self.extra_raw.items()))
        first = [("data-demo-raw", self.demo_corpora)] if s.demo_corpora else []
        return [*first, *((f"data-{Path(prefix).name}", self._preprocess(prefix, raw)) for prefix, raw in sources)]

    def demo_corpora(self) -> Command | str:
        """DEMO_CORPORA=1: the demo corpora's raw JSONL, for the base's own tokenizer, with the larger
        ones (the modern English passages, evaluated as en_passages; the Korean R&D manuals,
        ko_rnd_*, for KO_TRAIN_INPUT / KO_EVAL_INPUT globs such as demo_raw/ko*_train.jsonl)."""
        out = demo_raw(self.s.data_dir)
        names = ("ko_train", "ko_valid", "en_valid", "en_modern_valid", "en_passages_valid", "ko_rnd_train",
                 "ko_rnd_valid")
        if all((out / f"{n}.jsonl").is_file() for n in names):
            return f"demo corpora (raw JSONL) ready in {out}"
        return _single("tools/prepare_demo_data.py", "--output-dir", out, "--raw-only", "--larger")

    def demo_model(self) -> Command | str:
        """DEMO_MODEL=1: SmolLM2-135M-Instruct as a Hugging Face folder at HF_MODEL (the tool checks
        it against transformers' GGUF load and writes the folder only when complete)."""
        folder = Path(self.s.hf_model)
        if (folder / "config.json").is_file():
            return f"demo model ready: {folder}"
        return _single("tools/prepare_demo_model.py", "--output-dir", folder)

    def _preprocess(self, prefix: Path, raw: str) -> Callable[[], Command | str]:
        def resolve() -> Command | str:
            if Path(f"{prefix}.idx").is_file():
                return f"dataset {prefix} ready"
            if not raw:
                raise SettingsError(f"dataset {prefix} is missing and no raw input is set "
                                    "(KO_TRAIN_INPUT / KO_EVAL_INPUT / EN_EVAL_INPUT)")
            out = str(prefix).removesuffix("_text_document")
            return _single("tools/preprocess_data.py", "--input", raw, "--output-prefix", out,
                           "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", self.tokenizer,
                           *self.s.preprocess_flags)
        return resolve

    def pretrain_base(self) -> Command | str:
        s, run = self.s, self.base_run
        if done_iters(run) >= s.base_iters:
            return f"base trained: {last_ckpt(run)}"
        resume = ["--load", str(run)] if (run / LATEST).is_file() else []
        return Command(kind="train", note=_resuming(run, s.base_iters), args=(
            *s.model_flags, *self.common(), "--method", "full", "--data-path", str(self.en_train),
            *self.schedule(s.base_iters, s.base_lr, s.base_iters, run), *resume))

    def convert_base(self) -> Command | str:
        s = self.s
        if self.converted.is_dir():
            return f"converted: {self.converted}"
        return _single("tools/convert_hf_to_megatron.py", "--load", s.hf_model, "--save", self.converted,
                       "--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp, "--no-progress")

    def upscale(self, method: str) -> Command | str:
        s, init = self.s, self.s.workdir / "ckpt" / method
        if init.is_dir():
            return f"upscaled: {init}"
        return _single("tools/upscale_checkpoint.py", "--load", self.base(), "--save", init,
                       "--scale-variant", method.removeprefix("scale-"), *s.scale_flags,
                       "--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp)

    def train(self, method: str) -> Command | str:
        """The method's continued run: SCALE methods start from their upscaled checkpoint, the
        others (full, freeze, llama-pro, lora) from the base; a run with a checkpoint resumes."""
        s, run = self.s, self.run_dir(method)
        if done_iters(run) >= s.train_iters:
            return f"trained: {last_ckpt(run)}"
        init = s.workdir / "ckpt" / method if method.startswith("scale-") else self.base()
        load = run if (run / LATEST).is_file() else init
        return Command(kind="train", note=_resuming(run, s.train_iters), args=(
            *self.common(), "--method", method, "--load", str(load), "--data-path", str(self.ko_train),
            *self.schedule(s.train_iters, s.lr_of(method), s.eval_interval, run, s.eval_iterations, s.save_iterations),
            *(["--seed", str(s.seed), "--eval-seed", str(EVAL_SEED)] if s.seed is not None else []),
            *s.method_flags.get(method, ())))

    def sweep_dir(self) -> Path:
        return self.run_dir("scale-route") / "sweep"

    def calibrated(self) -> Path:
        """scale-route's checkpoint with the sweep's calibrated router as its default (tools/route_sweep.py --save)."""
        return self.sweep_dir() / "calibrated"

    def final(self, method: str) -> Path:
        """The checkpoint a method's benchmarks and export read: its run's last, or for SCALE-Route
        swept, the calibrated one."""
        if method == "scale-route" and sweeps(self.s):
            return self.calibrated()
        return last_ckpt(self.run_dir(method))

    def route_sweep(self) -> Command | str:
        """SCALE-Route's router at every tau of every statistic, from one pass over the first
        ROUTE_SWEEP_SAMPLES windows of the held-out English and Korean sets; tau calibrated on the
        next as many windows (held out from the evaluated ones), a decision per ROUTE_UNIT (each
        unit deciding by its first token, as the model does), and ROUTE_STATISTIC's calibrated
        router saved as the run's calibrated checkpoint. Done when sweep.json records the run's
        last checkpoint and these settings."""
        s, out, load = self.s, self.sweep_dir(), last_ckpt(self.run_dir("scale-route"))
        n = s.route_sweep_samples
        units = [s.route_unit] + (["token"] if s.route_unit != "token" else [])
        want = {"load": str(load), "samples": n, "seq_length": s.seq_length, "keep_old": s.route_keep_old,
                "min_new_adapt": s.route_min_new_adapt, "calibration_skip": n, "direction": "auto",
                "units": units, "pool": "first", "calibrate_with": s.route_statistic, "save": str(self.calibrated())}
        if _recorded_settings(out / "sweep.json", want) and self.calibrated().is_dir():
            return f"swept: {out / 'sweep.json'}"
        return _single("tools/route_sweep.py", "--load", load, "--old-data", f"en={self.en_eval}",
                       "--new-data", f"ko={self.ko_eval}", "--out", out, "--seq-length", s.seq_length,
                       "--samples", n, "--batch-size", s.micro_batch, "--tensor-model-parallel-size", s.tp,
                       "--keep-old", s.route_keep_old, "--min-new-adapt", s.route_min_new_adapt,
                       "--calibration-old-data", self.en_eval, "--calibration-new-data", self.ko_eval,
                       "--calibration-skip", n, "--route-units", *units, "--route-pool", "first",
                       *(["--tokenizer", self.tokenizer] if s.route_unit != "token" else []),
                       "--calibrate-with", s.route_statistic, "--save", self.calibrated())

    def eval_dir(self) -> Path:
        return self.s.workdir / "report" / "eval"

    def held_out(self) -> dict[str, str]:
        """Every held-out set the runs evaluate, by name (en, ko, then the extra old-domain sets)."""
        return {"en": str(self.en_eval), "ko": str(self.ko_eval), **{n: str(p) for n, p in self.extra.items()}}

    def text_bytes(self) -> Command | str:
        """Tokens, UTF-8 bytes and characters of each held-out set: the report turns every
        evaluation's per-token loss on them into bits per byte. Done when text_bytes.json records
        these sets and tokenizer."""
        out = self.eval_dir() / "text_bytes.json"
        sets = self.held_out()
        try:
            got = json.loads(out.read_text())
            if got["tokenizer"] == self.tokenizer and {n: r["prefix"] for n, r in got["sets"].items()} == sets:
                return f"held-out bytes counted: {out}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return _single("tools/text_bytes.py", "--tokenizer-model", self.tokenizer,
                       *(a for n, p in sets.items() for a in ("--data", f"{n}={p}")), "--output", out)

    def benchmark(self, name: str) -> Command | str:
        """BENCHMARKS on the base's checkpoint (name "base") or a method's last one. Done when its
        JSON records that checkpoint, the tasks and the limit."""
        s = self.s
        ckpt = self.base() if name == "base" else self.final(name)
        out = self.eval_dir() / f"{name}.json"
        limit = s.benchmark_limit or None
        try:
            got = json.loads(out.read_text())
            if (got["checkpoint"], got["limit"], sorted(got["results"])) == (
                    str(ckpt), limit, sorted(s.benchmarks.split(","))):
                return f"benchmarks scored: {out}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return _single("tools/eval_benchmarks.py", "--load", ckpt, "--tokenizer", self.tokenizer,
                       "--tasks", s.benchmarks, *(["--limit", limit] if limit else []),
                       "--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp, "--output", out)

    def finished(self) -> list[str]:
        """The methods the report covers: all (one job trains them all before), or, side by side
        (ARRAY=1: each in its own task, which may have failed), those whose run reached TRAIN_ITERS."""
        s = self.s
        return [m for m in s.methods if not self.side_by_side or done_iters(self.run_dir(m)) >= s.train_iters]

    def report(self) -> Command | str:
        """The finished runs, and why the others are missing (an ARRAY=1 task that failed). The
        base's numbers: the tiny base's last evaluation, or (converted base) the first finished
        method's iteration-0 evaluation, made before its first step. Skipped when results.json
        covers the same runs and failures and is newer than every input (a second submission
        into the same WORKDIR, a requeue: delete report/ to have it written again)."""
        s, done = self.s, self.finished()
        failed = [a for m in s.methods if m not in done for a in ("--failed", f"{m}={why_missing(s, m)}")]
        if not done:
            raise SettingsError("no method finished its run: " + "; ".join(failed[1::2]))
        if s.from_scratch:
            base = ["--base", str(self.base_run / "metrics.jsonl")]
        else:
            base = ["--base", str(self.run_dir(done[0]) / "metrics.jsonl"), "--base-iteration", "0"]
        runs = [a for m in done for a in ("--run", f"{m}={self.run_dir(m) / 'metrics.jsonl'}")] + failed
        old = [a for name in ("en", *self.extra) for a in ("--old", name)]
        sweep = ["--route-sweep", self.sweep_dir() / "sweep.json"] if sweeps(s) and "scale-route" in done else []
        bench = [a for m in ("base", *done) for a in ("--benchmarks", f"{m}={self.eval_dir() / f'{m}.json'}")
                 ] if s.benchmarks else []
        sizes = self.eval_dir() / "text_bytes.json"
        inputs = [Path(base[1]), *(self.run_dir(m) / "metrics.jsonl" for m in done), *map(Path, sweep[1:]),
                  sizes, *map(Path, (b.split("=", 1)[1] for b in bench[1::2]))]
        if _report_current(s.workdir / "report" / "results.json", done, dict(f.split("=", 1) for f in failed[1::2]),
                           inputs):
            return f"report up to date: {s.workdir / 'report' / 'report.md'}"
        return _single("tools/scale_report.py", *base, *runs, "--text-bytes", sizes,
                       *bench, *old, "--output", s.workdir / "report", *sweep)

    def export(self, method: str) -> Command | str:
        s, out = self.s, self.s.workdir / "hf" / method
        if out.is_dir():
            return f"exported: {out}"
        return _single("tools/convert_megatron_to_hf.py", "--load", self.final(method), "--save", out,
                       "--tokenizer", self.tokenizer, "--no-progress", *(["--verify"] if s.verify_export else []))

    def samples(self) -> Command | str:
        """Greedy English and Korean continuations of the HF base (when there is one) and every export.
        Skipped when generations.json holds these models and is newer than each one's config.json."""
        s = self.s
        folders = ({} if s.from_scratch else {"base": Path(s.hf_model)}) | {
            m: s.workdir / "hf" / m for m in self.finished()}
        out = s.workdir / "report" / "generations.json"
        try:
            current = (list(json.loads(out.read_text())) == list(folders) and all(
                out.stat().st_mtime >= (f / "config.json").stat().st_mtime for f in folders.values()))
        except (OSError, ValueError):
            current = False
        if current:
            return f"generations written: {out.with_suffix('.md')}"
        return _single("tools/generate_samples.py", *(a for n, f in folders.items() for a in ("--model", f"{n}={f}")),
                       "--output", s.workdir / "report")

    def lm_eval(self, method: str) -> Command:
        s = self.s
        return _single("tools/lm_eval_hf.py", "--model", s.workdir / "hf" / method, "--tasks", s.lm_eval_tasks,
                       "--output", s.workdir / "report" / f"lm_eval_{method}.json", *s.lm_eval_flags)


def actions(s: Settings, part: str | None = None) -> list[Action]:
    """Every action of the recipe in order (the same list whatever $WORKDIR holds), or those of one
    part of an ARRAY=1 submission: "prepare", a method (its upscaling, training, sweep, export and
    lm-eval), or "report"."""
    r = Recipe(s, side_by_side=part is not None)
    # (lock key, resolve[, its part when not the step's]) of each action of one step
    Todo = list[tuple[str, Callable[[], Command | str]] | tuple[str, Callable[[], Command | str], str]]
    steps: list[tuple[str, str, Todo]] = []
    if s.demo_model:  # before the data: preprocessing reads its tokenizer
        steps.append((f"prepare the demo model SmolLM2-135M-Instruct in {s.hf_model}", "prepare",
                      [("demo-model", r.demo_model)]))
    steps.append(("data", "prepare", r.data()))
    if s.from_scratch:
        steps.append((f"pre-train a tiny base on English ({s.base_iters} iterations, --method full from scratch)",
                      "prepare", [("base", r.pretrain_base)]))
    else:
        steps.append((f"convert {s.hf_model} to a Megatron checkpoint (TP={s.tp}, PP={s.pp})", "prepare",
                      [("base", r.convert_base)]))
    for m in s.methods:
        if m.startswith("scale-"):
            steps.append((f"upscale the base for {m}", m, [(f"upscale-{m}", lambda m=m: r.upscale(m))]))
        steps.append((f"continue on Korean with --method {m} ({s.train_iters} iterations)", m,
                      [(f"train-{m}", lambda m=m: r.train(m))]))
        if m == "scale-route" and sweeps(s):
            steps.append(("sweep SCALE-Route's router: every tau of every statistic on the held-out sets", m,
                          [("route-sweep", r.route_sweep)]))
    # side by side: the held-out sets' bytes and the base's benchmarks are the preparation's,
    # each method's benchmarks its own task's (after its training), the report the report job's
    bench: Todo = [(f"benchmark-{m}", lambda m=m: r.benchmark(m), "prepare" if m == "base" else m)
                   for m in ("base", *s.methods)] if s.benchmarks else []
    steps.append(("evaluate: English (forgetting) and Korean (learning) perplexity and bits per byte"
                  + (f", benchmark accuracy before and after ({s.benchmarks})" if s.benchmarks else ""), "report",
                  [("text-bytes", r.text_bytes, "prepare"), *bench, ("report", r.report)]))
    if s.export:
        for m in s.methods:
            todo: Todo = [(f"export-{m}", lambda m=m: r.export(m))]
            if s.lm_eval_tasks:
                todo.append((f"lm-eval-{m}", lambda m=m: r.lm_eval(m)))
            steps.append((f"export {m} to Hugging Face", m, todo))
        if s.samples:
            steps.append(("greedy generations in English and Korean (report/generations.md)", "report",
                          [("samples", r.samples)]))
    def work(key: str) -> Callable[[], int]:
        if key.startswith("train-"):
            run, iters = r.run_dir(key.removeprefix("train-")), s.train_iters
        elif key == "base" and s.from_scratch:
            run, iters = r.base_run, s.base_iters
        else:
            return lambda: 1
        return lambda: max(0, iters - done_iters(run))

    listed = [Action(step=n, title=title, resolve=item[1], key=item[0], part=item[2] if len(item) == 3 else where,
                     work=work(item[0]))
              for n, (title, where, todo) in enumerate(steps, 1) for item in todo]
    return [a for a in listed if part is None or a.part == part]


def run_name(method: str, seed: int | None) -> str:
    """The folder of a method's continued run under $WORKDIR/runs: METHOD, or METHOD-seedSEED."""
    return method if seed is None else f"{method}-seed{seed}"


def sweeps(s: Settings) -> bool:
    """The recipe sweeps SCALE-Route's router (ROUTE_SWEEP=1 and scale-route among METHODS)."""
    return s.route_sweep and "scale-route" in s.methods


def _recorded_settings(path: Path, want: dict[str, object]) -> bool:
    """`path` (a route sweep's JSON) exists and its settings hold every item of `want`."""
    try:
        got = json.loads(path.read_text()).get("settings", {})
    except (OSError, ValueError, AttributeError):
        return False
    return all(got.get(k) == v for k, v in want.items())


def _report_current(results: Path, runs: list[str], failed: dict[str, str], inputs: list[Path]) -> bool:
    """results.json reports exactly `runs` and `failed` and is newer than each input."""
    try:
        got = json.loads(results.read_text())
        newer = all(results.stat().st_mtime >= p.stat().st_mtime for p in inputs)
    except (OSError, ValueError):
        return False
    return newer and [r.get("method") for r in got.get("runs", [])] == runs and got.get("failed", {}) == failed


def _resuming(run: Path, iters: int) -> str:
    """What a run that has saved before says as it starts again (a requeued job)."""
    done = done_iters(run)
    return f"resuming from iteration {done} of {iters} saved in {run}" if done else ""


def _single(script: str, *args: object) -> Command:
    return Command(kind="single", args=(script, *map(str, args)))

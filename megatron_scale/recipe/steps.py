"""The Korean recipe's steps, as data: what each step runs, and what it skips because it is done.

    [prepare the demo model] -> data -> [pre-train the tiny base | convert the HF base]
         -> per method: [upscale] -> train [-> the routing method: sweep its router over every tau]
         -> evaluate: held-out bytes [, benchmarks of the base and every method], the report
         -> per method: export to HF [-> lm-eval]

`actions(settings)` lists every action in order (command.py's Action: a step title and a
`resolve()` that looks at $WORKDIR when called and returns either a message, done: skipped, or a
Command). The list itself never depends on $WORKDIR, so the launcher (recipe/launch.py) runs
action k and then decides k+1, which sees what the actions before it wrote. That is how a
requeued job resumes: finished datasets, conversions, upscalings, runs and exports are skipped,
and the interrupted run continues from `--load` of its own save directory. Whether an output is
done is the file's own "is it current?" (megatron_scale/artifacts.py) where a later step reads it.

Each action also names what it writes (`key`, its lock in $WORKDIR/locks: the launcher decides
and runs it under that lock, so jobs sharing a WORKDIR never do one action twice at once; the
data step's lock and records are in DATA_DIR when it lies outside $WORKDIR, and the demo model's
beside HF_MODEL, so jobs with other WORKDIRs that share them make each once and never clear one
another's) and
the job of an ARRAY=1 submission that runs it (`part`: "prepare", its method, or "report";
megatron_scale/recipe/array.py). This module holds the steps up to training; evaluate.py those
after it; layout.py where everything lives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from megatron_scale import artifacts
from megatron_scale import method_catalog as catalog
from megatron_scale.recipe import evaluate, records
from megatron_scale.recipe.command import Action, Command, Key, single
from megatron_scale.recipe.layout import BASE, DEMO_MODEL, EVAL_SEED, Layout, last_ckpt
from megatron_scale.recipe.settings import Settings, SettingsError, demo_raw

__all__ = ["Action", "Command", "Key", "actions"]

Resolve = Callable[[], Command | str]


def recorded(r: Layout, key: Key, command: Command, done: str, *outputs: object) -> Command | str:
    """`done` when the outputs' completion record (recipe/records.py; in Layout.home(key)/records
    when not $WORKDIR's) says they are whole and made with `command`'s settings; else `command`, to
    make them, saying why in one line when something was there. A record made with other settings
    is refused (SettingsError)."""
    command = replace(command, outputs=tuple(map(str, outputs)))
    ok, why = records.check(r.s.workdir, str(key), command.args, command.outputs, r.home(key))
    if ok:
        return done
    return replace(command, note=why) if why else command


def _pair(prefix: Path) -> tuple[str, str]:
    return f"{prefix}.bin", f"{prefix}.idx"


def data(r: Layout) -> list[tuple[Key, Resolve]]:
    """(lock key, resolve) of each dataset."""
    s = r.s
    if s.from_scratch:
        def demo() -> Command | str:
            made = (r.en_train, r.ko_train, r.ko_eval, r.en_eval, *r.extra.values())
            return recorded(r, Key("data"), single("tools/prepare_demo_data.py", "--output-dir", s.data_dir),
                            f"demo corpora ready in {s.data_dir}", r.tokenizer, *(f for p in made for f in _pair(p)))
        return [(Key("data"), demo)]
    sources = ((r.ko_train, s.ko_train_input), (r.ko_eval, s.ko_eval_input), (r.en_eval, s.en_eval_input),
               *((r.extra[name], raw) for name, raw in r.extra_raw.items()))
    first = [(Key("data", "demo-raw"), lambda: demo_corpora(r))] if s.demo_corpora else []
    return [*first, *((Key("data", Path(prefix).name), _preprocess(r, prefix, raw)) for prefix, raw in sources)]


def demo_corpora(r: Layout) -> Command | str:
    """DEMO_CORPORA=1: the demo corpora's raw JSONL, for the base's own tokenizer, with the larger
    ones (the modern English passages, evaluated as en_passages; the Korean R&D manuals,
    ko_rnd_*, for KO_TRAIN_INPUT / KO_EVAL_INPUT globs such as demo_raw/ko*_train.jsonl)."""
    out = demo_raw(r.s.data_dir)
    names = ("ko_train", "ko_valid", "en_valid", "en_modern_valid", "en_passages_valid", "ko_rnd_train",
             "ko_rnd_valid")
    return recorded(r, Key("data", "demo-raw"), single("tools/prepare_demo_data.py", "--output-dir", out, "--raw-only", "--larger"),
                    f"demo corpora (raw JSONL) ready in {out}", *(out / f"{n}.jsonl" for n in names))


def demo_model(r: Layout) -> Command | str:
    """DEMO_MODEL=1: SmolLM2-135M-Instruct as a Hugging Face folder at HF_MODEL (the tool checks
    it against transformers' GGUF load and writes the folder only when complete)."""
    folder = Path(r.s.hf_model)
    return recorded(r, DEMO_MODEL, single("tools/prepare_demo_model.py", "--output-dir", folder),
                    f"demo model ready: {folder}", folder)


def _preprocess(r: Layout, prefix: Path, raw: str) -> Resolve:
    """A dataset made from a raw input is the recipe's (recorded); one given without a raw input
    is the user's, used as it is."""
    def resolve() -> Command | str:
        if not raw:
            if Path(f"{prefix}.idx").is_file():
                return f"dataset {prefix} ready"
            raise SettingsError(f"dataset {prefix} is missing and no raw input is set "
                                "(KO_TRAIN_INPUT / KO_EVAL_INPUT / EN_EVAL_INPUT)")
        out = str(prefix).removesuffix("_text_document")
        return recorded(r, Key("data", Path(prefix).name), single(
            "tools/preprocess_data.py", "--input", raw, "--output-prefix", out, "--tokenizer-type",
            "HuggingFaceTokenizer", "--tokenizer-model", r.tokenizer, *r.s.preprocess_flags),
            f"dataset {prefix} ready", *_pair(prefix))
    return resolve


def pretrain_base(r: Layout) -> Command | str:
    s, run = r.s, r.base_run
    if artifacts.TRACKER.current(run / artifacts.MARKER, s.base_iters):
        return f"base trained: {last_ckpt(run)}"
    resume = ["--load", str(run)] if (run / artifacts.MARKER).is_file() else []
    return Command(kind="train", note=_resuming(run, s.base_iters), args=(
        *s.model_flags, *r.common(), "--method", catalog.REFERENCE, "--data-path", str(r.en_train),
        *r.schedule(s.base_iters, s.base_lr, s.base_iters, run), *resume))


def convert_base(r: Layout) -> Command | str:
    s = r.s
    return recorded(r, BASE, single(
        "tools/convert_hf_to_megatron.py", "--load", s.hf_model, "--save", r.converted,
        "--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp, "--no-progress"),
        f"converted: {r.converted}", r.converted)


def upscale(r: Layout, method: str) -> Command | str:
    s, init = r.s, r.init(method)
    return recorded(r, Key("upscale", method), single(
        "tools/upscale_checkpoint.py", "--load", r.base(), "--save", init,
        "--scale-variant", catalog.method(method).variant, *s.scale_flags,
        "--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp), f"upscaled: {init}", init)


def train(r: Layout, method: str) -> Command | str:
    """The method's continued run, from its start (Layout.init); a run with a checkpoint resumes."""
    s, run = r.s, r.run_dir(method)
    if artifacts.TRACKER.current(run / artifacts.MARKER, s.train_iters):
        return f"trained: {last_ckpt(run)}"
    load = run if (run / artifacts.MARKER).is_file() else r.init(method)
    return Command(kind="train", note=_resuming(run, s.train_iters), args=(
        *r.common(), "--method", method, "--load", str(load), "--data-path", str(r.ko_train),
        *r.schedule(s.train_iters, s.lr_of(method), s.eval_interval, run, s.eval_iterations, s.save_iterations),
        *(["--seed", str(s.seed), "--eval-seed", str(EVAL_SEED)] if s.seed is not None else []),
        *s.method_flags.get(method, ())))


def export(r: Layout, method: str) -> Command | str:
    s, out = r.s, r.hf(method)
    return recorded(r, Key("export", method), single(
        "tools/convert_megatron_to_hf.py", "--load", r.final(method), "--save", out,
        "--tokenizer", r.tokenizer, "--no-progress", *(["--verify"] if s.verify_export else [])),
        f"exported: {out}", out)


def actions(s: Settings, part: str | None = None) -> list[Action]:
    """Every action of the recipe in order (the same list whatever $WORKDIR holds), or those of one
    part of an ARRAY=1 submission: "prepare", a method (its upscaling, training, sweep, export and
    lm-eval), or "report"."""
    r = Layout(s, side_by_side=part is not None)
    # (lock key, resolve[, its part when not the step's]) of each action of one step
    Todo = list[tuple[Key, Resolve] | tuple[Key, Resolve, str]]
    steps: list[tuple[str, str, Todo]] = []  # (title, part, its actions)
    if s.demo_model:  # before the data: preprocessing reads its tokenizer
        steps.append((f"prepare the demo model SmolLM2-135M-Instruct in {s.hf_model}", "prepare",
                      [(DEMO_MODEL, lambda: demo_model(r))]))
    steps.append(("data", "prepare", data(r)))
    if s.from_scratch:
        steps.append((f"pre-train a tiny base on English ({s.base_iters} iterations, --method full from scratch)",
                      "prepare", [(BASE, lambda: pretrain_base(r))]))
    else:
        steps.append((f"convert {s.hf_model} to a Megatron checkpoint (TP={s.tp}, PP={s.pp})", "prepare",
                      [(BASE, lambda: convert_base(r))]))
    for m in s.methods:
        if catalog.method(m).upscaled:
            steps.append((f"upscale the base for {m}", m, [(Key("upscale", m), lambda m=m: upscale(r, m))]))
        steps.append((f"continue on Korean with --method {m} ({s.train_iters} iterations)", m,
                      [(Key("train", m), lambda m=m: train(r, m))]))
        if m == r.router:
            steps.append((f"sweep {catalog.label(m)}'s router: every tau of every statistic on the held-out sets", m,
                          [(Key("route-sweep"), lambda: evaluate.route_sweep(r))]))
    # side by side: the held-out sets' bytes and the base's benchmarks are the preparation's,
    # each method's benchmarks its own task's (after its training), the report the report job's
    bench: Todo = [(Key("benchmark", m), lambda m=m: evaluate.benchmark(r, m), "prepare" if m == "base" else m)
                   for m in ("base", *s.methods)] if s.benchmarks else []
    steps.append(("evaluate: English (forgetting) and Korean (learning) perplexity and bits per byte"
                  + (f", benchmark accuracy before and after ({s.benchmarks})" if s.benchmarks else ""), "report",
                  [(Key("text-bytes"), lambda: evaluate.text_bytes(r), "prepare"), *bench,
                   (Key("report"), lambda: evaluate.report(r))]))
    if s.export:
        for m in s.methods:
            todo: Todo = [(Key("export", m), lambda m=m: export(r, m))]
            if s.lm_eval_tasks:
                todo.append((Key("lm-eval", m), lambda m=m: evaluate.lm_eval(r, m)))
            steps.append((f"export {m} to Hugging Face", m, todo))
        if s.samples:
            steps.append(("greedy generations in English and Korean (report/generations.md)", "report",
                          [(Key("samples"), lambda: evaluate.samples(r))]))

    def work(key: Key) -> Callable[[], int]:
        if key.kind == "train":
            run, iters = r.run_dir(key.of), s.train_iters
        elif key == BASE and s.from_scratch:
            run, iters = r.base_run, s.base_iters
        else:
            return lambda: 1
        return lambda: max(0, iters - artifacts.saved_iterations(run))

    listed = [Action(step=n, title=title, resolve=item[1], key=item[0], part=item[2] if len(item) == 3 else where,
                     work=work(item[0]), home=r.home(item[0]))
              for n, (title, where, todo) in enumerate(steps, 1) for item in todo]
    return [a for a in listed if part is None or a.part == part]


def _resuming(run: Path, iters: int) -> str:
    """What a run that has saved before says as it starts again (a requeued job)."""
    done = artifacts.saved_iterations(run)
    return f"resuming from iteration {done} of {iters} saved in {run}" if done else ""

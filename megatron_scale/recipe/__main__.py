"""The launcher's side of the recipe (examples/scale_korean.sh), settings from the environment:

    python -m megatron_scale.recipe summary       # check the settings, make $WORKDIR, print what runs
    python -m megatron_scale.recipe next K [again] # action K (1-based) of megatron_scale.recipe.steps
    python -m megatron_scale.recipe done K        # whether action K is done now: `done` or `todo`
    python -m megatron_scale.recipe exit K RC     # the launcher exits (at action K, status RC)
    python -m megatron_scale.recipe plan          # every action as decided now (a dry run)
    python -m megatron_scale.recipe submit SCRIPT CONFIG [SBATCH FLAGS...]   # ARRAY=1: the jobs

The actions are the whole recipe's, or, in a job of an ARRAY=1 submission (SCALE_PART set), its
part's (megatron_scale.recipe.array). `next K` first releases the locks this job holds (its
previous action has ended), then takes action K's lock ($WORKDIR/locks, megatron_scale.recipe.lock)
and decides under it. It prints the step's header (before a step's first action) and any "already
done" or "resuming" message on stderr; on stdout what to launch, one word per line: `single` or
`train` then the arguments, `skip` when the action is done, `wait` then seconds when another job
holds its lock (ask again, with `again`: no header twice), or `end` after the last action.
`done K` asks again after a launch: a training that stopped on a signal (it saved and exited 0)
is still `todo`. `exit` releases this job's locks and, in an ARRAY=1 job, records how its part
ended for the report. An unusable setting is one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from megatron_scale.recipe.array import part_of, record_exit, submit
from megatron_scale.recipe.lock import Locks, holder_of
from megatron_scale.recipe.progress import Timings, duration, estimate, job_start, where
from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import Action, Command, actions


def _next(s: Settings, todo: list[Action], k: int, locks: Locks, again: bool, part: str | None) -> list[str]:
    locks.release_all()
    timings = Timings(s.workdir)
    if k > 1 and not again:
        _ended(timings, todo[k - 2])
    started_at = job_start(os.environ)
    if k > len(todo):
        w = s.workdir
        took = f" in {duration(time.time() - started_at)}" if started_at is not None else ""
        if part in (None, "report"):
            _say(f"\ndone{took}: table {w}/report/report.md, curves {w}/report/perplexity.png"
                 + (f", models {w}/hf/" if s.export else "")
                 + (f", generations {w}/report/generations.md" if s.export and s.samples else ""))
        else:
            _say(f"\ndone{took}: {part}")
        return ["end"]
    action = todo[k - 1]
    if not again and (k == 1 or todo[k - 2].step != action.step):
        left, unknown = estimate(_work_left(todo[k - 1:]), timings.read(), s.step_hints)
        progress = where(action.step, todo[-1].step if part is None else max(a.step for a in todo),
                         started_at, left, unknown)
        _say(f"\n==> [{time.strftime('%H:%M:%S')}] step {action.step}: {action.title}\n    {progress}")
    holder = locks.acquire(action.key)
    if holder is not None:
        if not again:
            _say(f"waiting: {holder} is doing this ({locks.path(action.key)}); looking again every "
                 f"{s.lock_poll} s (delete that file only if its job is gone)")
        return ["wait", str(s.lock_poll)]
    got = action.resolve()
    if isinstance(got, str):
        locks.release(action.key)
        _say(f"skipped, done before: {got}")
        return ["skip"]
    bad = [a for a in got.args if "\n" in a]
    if bad:
        raise SettingsError(f"an argument holds a newline: {bad[0]!r}")
    if got.note:
        _say(got.note)
    timings.started(action.key, action.work())
    return [got.kind, *got.args]


def _work_left(todo: list[Action]) -> dict[str, int]:
    """The actions not done yet, each with its work (a training's iterations left, else 1). An
    action that cannot decide yet (its inputs are not made) is to do."""
    left = {}
    for a in todo:
        try:
            if isinstance(a.resolve(), str):
                continue
        except (SettingsError, OSError, ValueError):
            pass
        left[a.key] = a.work()
    return left


def _ended(timings: Timings, action: Action) -> None:
    """`action` was the last one launched (or skipped): keep its time if it is done now."""
    try:
        done = isinstance(action.resolve(), str)
    except (SettingsError, OSError, ValueError):
        done = False
    timings.ended(action.key, done)


def _done(todo: list[Action], k: int) -> str:
    if not 1 <= k <= len(todo):
        raise SettingsError(f"done {k}: there are actions 1 to {len(todo)}")
    got = todo[k - 1].resolve()
    if isinstance(got, str):
        _say(got)
        return "done"
    _say("not finished" + (f": {got.note}" if got.note else ""))
    return "todo"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _usage(argv: list[str]) -> bool:
    words = {"summary": (0, 0), "plan": (0, 0), "next": (1, 2), "done": (1, 1), "exit": (2, 2), "submit": (2, 999)}
    if not argv or argv[0] not in words:
        return False
    lo, hi = words[argv[0]]
    n = len(argv) - 1
    if not lo <= n <= hi:
        return False
    if argv[0] in ("next", "done", "exit") and not argv[1].isdigit():
        return False
    return argv[0] != "next" or n == 1 or argv[2] == "again"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not _usage(argv):
        print("usage: python -m megatron_scale.recipe {summary | next K [again] | done K | exit K RC | plan | "
              "submit SCRIPT CONFIG [SBATCH FLAGS...]}", file=sys.stderr)
        return 2
    try:
        s = Settings.from_env(os.environ, Path(os.environ.get("SCALE_REPO") or Path.cwd()))
        part = part_of(s, os.environ)
        todo = actions(s, part)
        locks = Locks(s.workdir / "locks", holder_of(os.environ))
        if argv[0] == "summary":
            for sub in ("ckpt", "runs", "hf", "report"):
                (s.workdir / sub).mkdir(parents=True, exist_ok=True)
            base = "a tiny base pre-trained here" if s.from_scratch else s.hf_model
            print(f"work dir {s.workdir}, base {base}, methods: {' '.join(s.methods)}"
                  + (f"; this job: {part}" if part else ""))
        elif argv[0] == "next":
            print("\n".join(_next(s, todo, int(argv[1]), locks, len(argv) == 3, part)))
        elif argv[0] == "done":
            print(_done(todo, int(argv[1])))
        elif argv[0] == "exit":
            locks.release_all()
            k, rc = int(argv[1]), int(argv[2])
            if 1 <= k <= len(todo):
                _ended(Timings(s.workdir), todo[k - 1])
            if part:
                step = f"{todo[k - 1].step}: {todo[k - 1].title}" if 1 <= k <= len(todo) else "(none)"
                record_exit(s, part, step, rc, finished=k > len(todo), env=os.environ)
        elif argv[0] == "submit":
            print("\n".join(submit(s, argv[1], argv[2], argv[3:])))
        else:
            for n, a in enumerate(todo, 1):
                try:
                    got = a.resolve()
                    what = f"{got.kind}: {' '.join(got.args)}" if isinstance(got, Command) else f"skip: {got}"
                except SettingsError as e:
                    what = f"error: {e}"
                print(f"{n:3d} step {a.step} ({a.title}) {what}")
    except SettingsError as e:
        print(f"recipe: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The launcher's side of the recipe (examples/scale_korean.sh), settings from the environment:

    python -m megatron_scale.recipe summary   # check the settings, make $WORKDIR, print what runs
    python -m megatron_scale.recipe next K    # action K (1-based) of megatron_scale.recipe.steps
    python -m megatron_scale.recipe done K    # whether action K is done now: `done` or `todo`
    python -m megatron_scale.recipe plan      # every action as decided now (a dry run)

`next K` prints the step's header (before a step's first action) and any "already done" or
"resuming" message on stderr; on stdout it prints what to launch, one word per line: `single` or
`train` then the arguments, `skip` when the action is done, or `end` after the last action.
`done K` asks again after a launch: a training that stopped on a signal (it saved and exited 0)
is still `todo`. An unusable setting is one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import Command, actions


def _next(s: Settings, k: int) -> list[str]:
    todo = actions(s)
    if k > len(todo):
        w = s.workdir
        _say(f"\ndone: table {w}/report/report.md, curves {w}/report/perplexity.png, models {w}/hf/"
             + (f", generations {w}/report/generations.md" if s.export and s.samples else ""))
        return ["end"]
    action = todo[k - 1]
    if k == 1 or todo[k - 2].step != action.step:
        _say(f"\n==> [{time.strftime('%H:%M:%S')}] step {action.step}: {action.title}")
    got = action.resolve()
    if isinstance(got, str):
        _say(got)
        return ["skip"]
    bad = [a for a in got.args if "\n" in a]
    if bad:
        raise SettingsError(f"an argument holds a newline: {bad[0]!r}")
    if got.note:
        _say(got.note)
    return [got.kind, *got.args]


def _done(s: Settings, k: int) -> str:
    todo = actions(s)
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m megatron_scale.recipe {summary | next K | done K | plan}"
    numbered = argv[0] in ("next", "done") if argv else False
    if (not argv or argv[0] not in ("summary", "next", "done", "plan") or numbered != (len(argv) == 2)
            or (numbered and not argv[1].isdigit())):
        print(usage, file=sys.stderr)
        return 2
    try:
        s = Settings.from_env(os.environ, Path(os.environ.get("SCALE_REPO") or Path.cwd()))
        if argv[0] == "summary":
            for sub in ("ckpt", "runs", "hf", "report"):
                (s.workdir / sub).mkdir(parents=True, exist_ok=True)
            base = "a tiny base pre-trained here" if s.from_scratch else s.hf_model
            print(f"work dir {s.workdir}, base {base}, methods: {' '.join(s.methods)}")
        elif argv[0] == "next":
            print("\n".join(_next(s, int(argv[1]))))
        elif argv[0] == "done":
            print(_done(s, int(argv[1])))
        else:
            for n, a in enumerate(actions(s), 1):
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

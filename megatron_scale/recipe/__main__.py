"""The recipe from the command line, settings from the environment:

    python -m megatron_scale.recipe run [SBATCH FLAGS...]   # the whole job (examples/scale_korean.sh execs it)
    python -m megatron_scale.recipe plan                    # every action as decided now (a dry run)

`run` launches every action in order and stops and requeues as Slurm asks (launch.py); with
ARRAY=1 it submits the methods side by side instead (array.py), the SBATCH FLAGS going to each
job. Both read the settings examples/scale_korean.sh leaves in the environment (the config it
sourced, SCALE_REPO, SCALE_CONFIG, PYTHON). An unusable setting is one line on stderr and exit
status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from megatron_scale.recipe.array import part_of
from megatron_scale.recipe.command import Command
from megatron_scale.recipe.launch import run
from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import actions

USAGE = "usage: python -m megatron_scale.recipe {run [SBATCH FLAGS...] | plan}"


def plan(env: Mapping[str, str]) -> None:
    s = Settings.from_env(env, Path(env.get("SCALE_REPO") or Path.cwd()))
    for n, a in enumerate(actions(s, part_of(s, env)), 1):
        try:
            got = a.resolve()
            what = f"{got.kind}: {' '.join(got.args)}" if isinstance(got, Command) else f"skip: {got}"
        except SettingsError as e:
            what = f"error: {e}"
        print(f"{n:3d} step {a.step} ({a.title}) {what}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("run", "plan") or (argv[0] == "plan" and len(argv) > 1):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if argv[0] == "run":
            return run(os.environ, argv[1:])
        plan(os.environ)
    except SettingsError as e:
        print(f"recipe: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

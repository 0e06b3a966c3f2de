"""Helpers of the recipe's tests: settings as the launcher hands them over, and the commands
the steps resolve to."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron_scale.recipe.lock import Locks
from megatron_scale.recipe.settings import Settings
from megatron_scale.recipe.steps import Command, actions

REPO = Path(__file__).resolve().parents[2]


def settings(work: Path, **env: str) -> Settings:
    return Settings.from_env({"WORKDIR": str(work), **env})


def sourced_env(config: str, **env: str) -> dict[str, str]:
    """The environment the launcher hands the recipe: `set -a; source CONFIG` over `env`."""
    base = {"PATH": os.environ["PATH"], "HOME": "/home/u", **env}
    out = subprocess.run(["bash", "-c", 'set -a; source "$0"; set +a; env -0', config], env=base, cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if item)


def resolved(s: Settings) -> list[Command | str]:
    return [a.resolve() for a in actions(s)]


def train_args(s: Settings, method: str) -> list[str]:
    (cmd,) = [c for c in resolved(s) if isinstance(c, Command) and c.kind == "train"
              and c.args[c.args.index("--method") + 1] == method and "--data-path" in c.args
              and "ko_train" in c.args[c.args.index("--data-path") + 1]]
    return list(cmd.args)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]



def make_outputs(command: Command) -> None:
    """Fake what a tool writes: each of the command's outputs, a file where it is named like one
    (.bin, .idx, .jsonl), else a folder holding a config.json."""
    for o in map(Path, command.outputs):
        o.parent.mkdir(parents=True, exist_ok=True)
        if o.suffix in (".bin", ".idx", ".jsonl"):
            o.write_bytes(b"x")
        else:
            o.mkdir(exist_ok=True)
            (o / "config.json").write_text("{}")


def made(s: Settings, key: str) -> Command:
    """Action `key` done as the launcher does it: its outputs written, then its completion record."""
    from megatron_scale.recipe import records

    (action,) = [a for a in actions(s) if str(a.key) == key]
    command = action.resolve()
    assert isinstance(command, Command) and command.outputs, (key, command)
    make_outputs(command)
    records.write(s.workdir, key, command.args, command.outputs, action.home)
    return command


def held_by_job_20(monkeypatch: pytest.MonkeyPatch, folder: Path, key: str,
                   seconds: float) -> tuple[list[float], Callable[[float], None]]:
    """`key`'s lock in `folder` taken by Slurm job 20 (running, the others not): the naps a
    launcher takes and its `sleep`, which has job 20 release the lock once `seconds` are slept."""
    monkeypatch.setattr("megatron_scale.recipe.lock.slurm_job_running", lambda job: job == "20")
    other = Locks(folder, "slurm:20")
    assert other.acquire(key) is None
    naps: list[float] = []

    def sleep(nap: float) -> None:
        naps.append(nap)
        if sum(naps) >= seconds:
            other.release(key)

    return naps, sleep

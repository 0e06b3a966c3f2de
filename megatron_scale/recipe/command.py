"""What the launcher is asked to do, and the command lines that do it: an Action (one thing a step
does, and whether it is done), the Command it runs when it is not, and Launch, the launcher's own
settings, which turn a Command into a command line and give every step its environment.

A Command is "single" (one process: `PYTHON SCRIPT ARGS`, which may start its own ranks: one
srun task when there is a container, else on this host) or "train" (`PYTHON -m
megatron_scale.train ARGS` on every rank: srun's tasks under Slurm, `torchrun --standalone
--nproc-per-node NPROC` on this machine). Standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from megatron_scale.recipe.settings import SettingsError

RANK_SHELL = ('echo "rank $SLURM_PROCID of $SLURM_NTASKS on node $SLURMD_NODENAME (local rank $SLURM_LOCALID), '
              'master $MASTER_ADDR:$MASTER_PORT"\n'
              'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec "$@"')
"""What each srun task runs before the training: it says where it is and sets torch's rank variables."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
DEFAULTS = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "NCCL_DEBUG": "WARN",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
"""Set for every step unless the environment sets them (NCCL_IB_HCA, NCCL_SOCKET_IFNAME: passed through)."""


@dataclass(kw_only=True, frozen=True)
class Command:
    """One process (or one set of ranks) to launch."""

    kind: Literal["single", "train"]
    """single: `python ARGS...`; train: `python -m megatron_scale.train ARGS...` on every rank."""
    args: tuple[str, ...]
    """The arguments after the python (single) or after the module (train)."""
    note: str = ""
    """Said before launching (a run that resumes: from which iteration)."""
    outputs: tuple[str, ...] = field(default=(), compare=False)
    """What it makes (files or folders), recorded when it exits 0 (recipe/records.py) and cleared
    before it runs; empty for a training, whose checkpoints and marker say where it stands. Not
    compared: it follows from `args`."""


@dataclass(frozen=True)
class Key:
    """What an action writes, typed: its kind ("train", "data", "report", ...) and what of (a
    method, a dataset; "" when the kind is the whole of it). Its text, "KIND" or "KIND-OF", names
    the action's lock, completion record and timing ($WORKDIR/locks/train-full.lock): decided
    here, never parsed back."""

    kind: str
    of: str = ""

    def __str__(self) -> str:
        return f"{self.kind}-{self.of}" if self.of else self.kind


@dataclass(kw_only=True, frozen=True)
class Action:
    """One thing a step does; `resolve()` decides, when called, whether it is already done."""

    step: int
    """1-based number of the step it belongs to (a step may hold several actions)."""
    title: str
    """The step's title, printed before its first action."""
    resolve: Callable[[], Command | str]
    """A Command to run, or a message saying why nothing needs running."""
    key: Key
    """What it writes; its lock ($WORKDIR/locks/KEY.lock): one job at a time decides and runs it."""
    home: Path | None = None
    """Where its lock and completion record live when not in $WORKDIR (HOME/locks, HOME/records):
    a DATA_DIR outside $WORKDIR for the data step, the folder holding an HF_MODEL outside it for
    DEMO_MODEL=1's (layout.py's Layout.home)."""
    part: str
    """The job of an ARRAY=1 submission that runs it: "prepare", its method, or "report"."""
    work: Callable[[], int] = lambda: 1
    """Its work left, for the estimate of time left (recipe/progress.py): a training's iterations
    still to run, 1 for anything else."""


def single(script: str, *args: object) -> Command:
    """`python SCRIPT ARGS...` (each argument as text)."""
    return Command(kind="single", args=(script, *map(str, args)))


@dataclass(kw_only=True, frozen=True)
class Launch:
    """The launcher's own settings, from the environment (the recipe's are Settings)."""

    repo: Path
    """SCALE_REPO: the checkout the steps run from (examples/scale_korean.sh sets it)."""
    python: str
    """PYTHON: the Python every step runs with (the script's venv, or `python` in a container)."""
    nproc: int = 2
    """NPROC: ranks of a training without Slurm (torchrun --nproc-per-node)."""
    container_image: str = ""
    """CONTAINER_IMAGE: run the steps in this image (srun --container-image, pyxis/enroot)."""
    container_mounts: str = ""
    """CONTAINER_MOUNTS: srun --container-mounts (default SCALE_REPO:SCALE_REPO)."""
    job: str = ""
    """SLURM_JOB_ID: the Slurm job this runs in; empty: no Slurm, torchrun on this machine."""
    master_port: int = 29500
    """MASTER_PORT (default 29500 + the job id mod 1000), plus the job's restarts: a requeued run's
    ranks must not meet its previous run's, which may still hold the port."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Launch:
        repo = Path(env.get("SCALE_REPO") or Path.cwd())
        given = {k: v for k, v in env.items() if v != ""}
        job = given.get("SLURM_JOB_ID", "")
        numbers = {}
        for var, default in (("NPROC", "2"), ("MASTER_PORT", str(29500 + int(job or 0) % 1000)),
                             ("SLURM_RESTART_COUNT", "0")):
            try:
                numbers[var] = int(given.get(var, default))
            except ValueError:
                raise SettingsError(f"{var}={given[var]!r} is not an integer") from None
        if numbers["NPROC"] < 1:
            raise SettingsError(f"NPROC={numbers['NPROC']} must be at least 1")
        return cls(repo=repo, python=given.get("PYTHON", sys.executable), nproc=numbers["NPROC"],
                   container_image=given.get("CONTAINER_IMAGE", ""),
                   container_mounts=given.get("CONTAINER_MOUNTS", f"{repo}:{repo}"), job=job,
                   master_port=numbers["MASTER_PORT"] + numbers["SLURM_RESTART_COUNT"])

    def step_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The environment every step runs in: the job's, with the launcher's settings."""
        out = {**DEFAULTS, **{k: v for k, v in env.items() if v != "" or k not in DEFAULTS}, **OFFLINE}
        path = env.get("PYTHONPATH", "")
        out.update(SCALE_REPO=str(self.repo), MASTER_PORT=str(self.master_port), SCALE_LAUNCHER_PID=str(os.getpid()),
                   PYTHONPATH=f"{self.repo}:{path}" if path else str(self.repo))  # tools/ import this checkout
        out.setdefault("SCALE_JOB_START", str(int(time.time())))
        return out

    def container(self) -> list[str]:
        if not self.container_image:
            return []
        return [f"--container-image={self.container_image}", f"--container-mounts={self.container_mounts}",
                f"--container-workdir={self.repo}"]

    def argv(self, command: Command) -> tuple[list[str], bool]:
        """The command line that launches `command`, and whether it is an srun."""
        if command.kind == "train":
            if self.job:
                return ["srun", "--kill-on-bad-exit=1", *self.container(), "bash", "-c", RANK_SHELL, "rank",
                        self.python, "-m", "megatron_scale.train", *command.args], True
            return [self.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.nproc}",
                    "-m", "megatron_scale.train", *command.args], False
        if self.job and self.container_image:
            return ["srun", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1", *self.container(), self.python,
                    *command.args], True
        return [self.python, *command.args], False

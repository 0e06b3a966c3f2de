"""The recipe's launcher: every action of the recipe (steps.actions) in order, each launched with
srun under Slurm or torchrun on this machine, stopped, saved and requeued the way Slurm asks.

    examples/scale_korean.sh CONFIG  ->  exec python -m megatron_scale.recipe run

For each action: its step's header (with where the job is and an estimate of the time left,
progress.py), its lock ($WORKDIR/locks, or a shared DATA_DIR's own for the data step; lock.py;
while another job holds it, LOCK_POLL seconds' wait), then its decision under the lock: skipped
when done, else its Command launched (srun or torchrun, command.py) and waited for. A step that
fails ends the job with its exit status.

Stopping early (docs/recipe.md, "Requeue and pre-emption"):
- SIGUSR1 to the launcher (`#SBATCH --signal=B:USR1@300`: the time limit is near): the running
  step saves and stops, and the job requeues itself;
- a training whose tasks got SIGTERM themselves (pre-emption's notice with a GraceTime, `scancel
  --signal=TERM JOB`) saves and exits 0 unfinished: the job requeues itself too;
- SIGTERM to the launcher (`scancel JOB`, Slurm ending the job): the running step saves what it
  can and the job stops without a requeue (Slurm's own pre-emption requeues by itself).
Under srun the step is asked with `scancel --signal=TERM JOB` (every step of the job, not the batch
shell: srun itself would SIGKILL its tasks on SIGTERM, and they could not save); torchrun passes
SIGTERM on to its workers. No further step starts once stopping; the requeued job skips what is
done. Without Slurm a stopped job says so, and the same command resumes it.

As the launcher ends, however it ends, it releases this job's locks and records the time of the
action it was in, and in an ARRAY=1 job how its part ended (array.py). Standard library only: it
runs on the batch host, outside any container image.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from megatron_scale.recipe import records
from megatron_scale.recipe.array import part_of, record_exit, submit
from megatron_scale.recipe.command import Action, Command, Key, Launch
from megatron_scale.recipe.lock import Locks, holder_of
from megatron_scale.recipe.progress import Timings, duration, estimate, job_start, where
from megatron_scale.recipe.settings import Settings, SettingsError
from megatron_scale.recipe.steps import actions

NAME = "scale_korean.sh"
"""How the launcher's own lines start: the script users started, and the name they search logs for."""


class Stop(Exception):
    """The launcher ends now, with this exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def say(text: str, err: bool = True) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


class Launcher:
    """One job's run of the recipe: `main()` runs it all; `begin`, `check`, `end` and `finish` are
    its parts, one action at a time."""

    def __init__(self, s: Settings, launch: Launch, env: Mapping[str, str], part: str | None = None, *,
                 spawn: Callable[..., Any] = subprocess.Popen, sleep: Callable[[float], None] = time.sleep) -> None:
        self.s, self.launch, self.part, self.spawn, self.sleep = s, launch, part, spawn, sleep
        self.env = launch.step_env(env)
        self.todo = actions(s, part)
        me = holder_of(self.env)
        # $WORKDIR/locks, and a DATA_DIR's own outside it (Action.home)
        self.locks = {home: Locks(home / "locks", me) for home in {s.workdir, *(a.home for a in self.todo if a.home)}}
        self.timings = Timings(s.workdir)
        self.started_at = job_start(self.env)
        self.step: Any = None  # the running step's process
        self.step_srun = self.stopping = self.requeue = False

    # ---- one action at a time ----------------------------------------------------------------
    def begin(self, k: int) -> Command | None:
        """Action k (1-based), the previous one having ended: its step's header (before the step's
        first action), its lock (waiting while another job holds it), then, under the lock, None
        when it is done (the lock released, saying why) or the Command to launch (timed from now)."""
        self._release_all()
        if k > 1:
            self._ended(self.todo[k - 2])
        action = self.todo[k - 1]
        if k == 1 or self.todo[k - 2].step != action.step:
            left, unknown = estimate(_work_left(self.todo[k - 1:]), self.timings.read(), self.s.step_hints)
            last = self.todo[-1].step if self.part is None else max(a.step for a in self.todo)
            progress = where(action.step, last, self.started_at, left, unknown)
            say(f"\n==> [{time.strftime('%H:%M:%S')}] step {action.step}: {action.title}\n    {progress}")
        waited = False
        locks = self._locks(action)
        while (holder := locks.acquire(str(action.key))) is not None:
            if not waited:
                say(f"waiting: {holder} is doing this ({locks.path(str(action.key))}); looking again every "
                    f"{self.s.lock_poll} s (delete that file only if its job is gone)")
            waited = True
            self._pause(self.s.lock_poll)
        got = action.resolve()
        if isinstance(got, str):
            locks.release(str(action.key))
            say(f"skipped, done before: {got}")
            return None
        if got.note:
            say(got.note)
        self.timings.started(action.key, action.work())
        return got

    def check(self, k: int) -> bool:
        """Whether action k is done now, saying why or where it stands (after a training, which
        exits 0 also when it stopped on a signal, saved)."""
        got = self.todo[k - 1].resolve()
        if isinstance(got, str):
            say(got)
            return True
        say("not finished" + (f": {got.note}" if got.note else ""))
        return False

    def end(self) -> None:
        """After the last action: its time kept, the locks released, where the outputs are."""
        self._release_all()
        if self.todo:
            self._ended(self.todo[-1])
        w = self.s.workdir
        took = f" in {duration(time.time() - self.started_at)}" if self.started_at is not None else ""
        if self.part in (None, "report"):
            say(f"\ndone{took}: table {w}/report/report.md, curves {w}/report/perplexity.png"
                + (f", models {w}/hf/" if self.s.export else "")
                + (f", generations {w}/report/generations.md" if self.s.export and self.s.samples else ""))
        else:
            say(f"\ndone{took}: {self.part}")

    def finish(self, k: int, status: int) -> None:
        """The launcher ends at action k (len + 1: after the last) with `status`: this job's locks
        released, the action's time kept if it is done, and in an ARRAY=1 job how its part ended."""
        self._release_all()
        if 1 <= k <= len(self.todo):
            self._ended(self.todo[k - 1])
        if self.part:
            step = f"{self.todo[k - 1].step}: {self.todo[k - 1].title}" if 1 <= k <= len(self.todo) else "(none)"
            record_exit(self.s, self.part, step, status, finished=k > len(self.todo), env=self.env)

    def _locks(self, action: Action) -> Locks:
        return self.locks[action.home or self.s.workdir]

    def _release_all(self) -> None:
        for locks in self.locks.values():
            locks.release_all()

    # ---- the whole job -----------------------------------------------------------------------
    def main(self, restore_signals: bool = True) -> int:
        """Every action in order; the exit status of the job. The launcher answers USR1 and TERM
        while it runs, and ignores TERM as it ends (a requeue's comes then); `restore_signals`
        puts the handlers back afterwards (not in the job's own process, which ends)."""
        before = {n: signal.signal(n, self._on_signal) for n in (signal.SIGUSR1, signal.SIGTERM)}
        k, status = 0, 0
        try:
            self._summary()
            for k in range(1, len(self.todo) + 1):
                if self.stopping:
                    self._stop("stopped on a signal between steps")
                command = self.begin(k)
                if command is None:
                    continue
                if command.outputs:  # what a stopped run left (the tools refuse to overwrite it)
                    records.clear(self.s.workdir, str(self.todo[k - 1].key), command.outputs, self.todo[k - 1].home)
                rc = self._launch(command)
                if rc != 0:
                    raise Stop(rc)
                if command.outputs:  # written last: the outputs are whole (recipe/records.py)
                    records.write(self.s.workdir, str(self.todo[k - 1].key), command.args, command.outputs,
                                  self.todo[k - 1].home)
                if command.kind == "train" and not self.check(k):
                    self.requeue = True  # pre-emption's notice (or a user's TERM) reached the tasks, not the launcher
                    self._stop("the training stopped before its last iteration (a signal to its tasks, or "
                               "--exit-interval)")
            k = len(self.todo) + 1
            self.end()
        except Stop as e:
            status = e.status
        except SettingsError as e:
            say(f"recipe: error: {e}")
            status = 2
        except KeyboardInterrupt:
            say(f"{NAME}: interrupted")
            status = 130
        except BaseException:
            status = 1
            raise
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a requeue's SIGTERM comes now: finish regardless
            try:
                self.finish(k, status)
            except Exception as e:  # noqa: BLE001 - the job's own status matters more than its bookkeeping
                say(f"{NAME}: could not record how the job ended: {e}")
            for n, handler in before.items() if restore_signals else ():
                signal.signal(n, handler)
        return status

    def _summary(self) -> None:
        launch, s = self.launch, self.s
        if launch.job:
            nodes = self.env.get("SLURM_JOB_NODELIST", "")
            r = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=False)
            self.env["MASTER_ADDR"] = (r.stdout.split() or [""])[0]
            say(f"job {launch.job}: nodes {nodes}, {self.env.get('SLURM_NTASKS', '')} tasks, master "
                f"{self.env['MASTER_ADDR']}:{launch.master_port}, restart {self.env.get('SLURM_RESTART_COUNT') or 0}",
                err=False)
        else:
            say(f"no Slurm: running on this machine with torchrun, {launch.nproc} ranks", err=False)
        for sub in ("ckpt", "runs", "hf", "report"):
            (s.workdir / sub).mkdir(parents=True, exist_ok=True)
        base = "a tiny base pre-trained here" if s.from_scratch else s.hf_model
        say(f"repo {launch.repo}, python {launch.python}, work dir {s.workdir}, base {base}, methods: "
            f"{' '.join(s.methods)}" + (f"; this job: {self.part}" if self.part else ""), err=False)

    def _launch(self, command: Command) -> int:
        """Run a step to its end, passing it a stop request; its exit status (128 + N: killed by signal N)."""
        if self.stopping:
            self._stop("stopped on a signal")
        argv, srun = self.launch.argv(command)
        self.step, self.step_srun = self.spawn(argv, env=self.env), srun
        if self.stopping:
            self._signal_step()  # a signal that came while it started
        try:
            try:
                rc = self.step.wait()
            except KeyboardInterrupt:  # ^C reached the step too (one process group): let it end first
                self.step.wait()
                raise
        finally:
            self.step, self.step_srun = None, False
        if self.stopping:
            self._stop("stopped on a signal")
        return 128 - rc if rc < 0 else rc

    def _pause(self, seconds: float) -> None:
        """Wait, unless asked to stop (then stop)."""
        left = seconds
        while not self.stopping and left > 0:  # in short naps: a signal is answered within half a second
            self.sleep(min(left, 0.5))
            left -= 0.5
        if self.stopping:
            self._stop("stopped on a signal")

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR1:
            self.requeue = True
        if self.stopping:
            return
        self.stopping = True
        say(f"{NAME}: {signal.Signals(signum).name}: asking the running step to save and stop")
        self._signal_step()

    def _signal_step(self) -> None:
        """Ask the running step to save and stop."""
        step = self.step
        if step is None:
            return
        if self.step_srun:
            try:
                if subprocess.run(["scancel", "--signal=TERM", self.launch.job], check=False).returncode == 0:
                    return
            except OSError:
                pass
        try:
            step.send_signal(signal.SIGTERM)  # torchrun passes it to its workers
        except ProcessLookupError:
            pass

    def _stop(self, why: str) -> None:
        """No step after this one: say why, requeue the job if asked (under Slurm), end."""
        say(f"{NAME}: {why}", err=False)
        if not self.launch.job:
            say(f"{NAME}: stopped; run the same command again to resume", err=False)
            raise Stop(0)
        if not self.requeue:
            say(f"{NAME}: stopped without requeueing (SIGTERM to the batch script: the job is being cancelled or "
                "ended by Slurm); submit it again to resume", err=False)
            raise Stop(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the requeue's own SIGTERM is expected now: not a stop request
        try:
            rc = subprocess.run(["scontrol", "requeue", self.launch.job], check=False).returncode
        except OSError:
            rc = 1
        # the requeue ends this run at once: scontrol itself may get the SIGTERM before it returns
        if rc == 0 or rc < 0:
            say(f"{NAME}: requeued job {self.launch.job}; when it starts again it skips the finished steps and "
                "resumes", err=False)
            raise Stop(0)
        say(f"{NAME}: scontrol requeue refused (a job submitted with --no-requeue?); submit it again to resume")
        raise Stop(1)

    def _ended(self, action: Action) -> None:
        """`action` was the last one launched (or skipped): keep its time if it is done now."""
        try:
            done = isinstance(action.resolve(), str)
        except (SettingsError, OSError, ValueError):
            done = False
        self.timings.ended(action.key, done)


def _work_left(todo: list[Action]) -> dict[Key, int]:
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


def run(env: Mapping[str, str], sbatch_flags: list[str]) -> int:
    """The whole job, from the environment (examples/scale_korean.sh sourced the config into it);
    with ARRAY=1 (outside a job of that submission), its submission instead, `sbatch_flags` going
    to each of its jobs."""
    launch = Launch.from_env(env)
    s = Settings.from_env(env, launch.repo)
    part = part_of(s, env)
    if s.array and part is None:
        script, config = launch.repo / "examples" / "scale_korean.sh", env.get("SCALE_CONFIG", "")
        if not config:
            raise SettingsError("ARRAY=1 needs SCALE_CONFIG, the config file each job sources")
        say("\n".join(submit(s, str(script), config, sbatch_flags)), err=False)
        return 0
    if sbatch_flags:
        raise SettingsError(f"arguments after the config ({' '.join(sbatch_flags)}) are sbatch flags, for ARRAY=1 "
                            "only; give a job's own to sbatch")
    return Launcher(s, launch, env, part).main(restore_signals=False)

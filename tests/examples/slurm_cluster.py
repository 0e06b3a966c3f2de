"""A throw-away Slurm cluster on this machine, for tests: a private munged, slurmctld, and one
`slurmd -N nI` per emulated node, each on its own port (Debian 12's Slurm 22.05 runs several
slurmd on one host). Nothing is written under /etc: clients use SLURM_CONF, and the node names
(n1, n2, ...) that `scontrol show hostnames` returns resolve inside the jobs because each slurmd
runs in its own mount namespace with a hosts file bind-mounted over /etc/hosts (jobs inherit it).
Every daemon is started here and stopped by the PID this module recorded. A watchdog process
(slurm_watchdog.py), started first, stops them when the process that started the cluster is gone
without stopping it (a timeout's SIGKILL of pytest, a crash): the daemons never outlive their test.

Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge; `ensure_slurm()`
installs them with apt-get when they are missing, or says why it cannot.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from megatron_scale.training.throughput import TIMED_FIELDS
from tests.examples.slurm_watchdog import start_time

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "munged", "munge", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
SEARCH_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


class SlurmUnavailable(RuntimeError):
    """Why no cluster can be started here (the test skips with this message)."""


def _missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b, path=SEARCH_PATH) is None]


def ensure_slurm() -> None:
    """Have the Slurm and munge binaries, installing the Debian packages if needed."""
    if os.geteuid() != 0:
        raise SlurmUnavailable("needs root (slurmd runs jobs as their submitting user, munged and mount namespaces)")
    if not _missing():
        pass
    elif shutil.which("apt-get") is None:
        raise SlurmUnavailable(f"missing {_missing()} and no apt-get to install {' '.join(PACKAGES)}")
    else:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
        r = subprocess.run(install, env=env, check=False, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:  # the package lists may be missing or stale
            subprocess.run(["apt-get", "update"], env=env, check=False, capture_output=True, timeout=600)
            r = subprocess.run(install, env=env, check=False, capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or _missing():
            raise SlurmUnavailable(f"apt-get install {' '.join(PACKAGES)} failed: {(r.stderr or r.stdout)[-500:]}")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise SlurmUnavailable(f"`unshare -m` is not permitted here ({r.stderr.strip()}); node names could not resolve")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    """Start with `start()`, stop with `stop()`; `env` is what a client (sbatch) needs."""

    base: Path
    nodes: int = 2
    cpus: int = 2
    extra: tuple[str, ...] = ()
    """More slurm.conf lines (e.g. PreemptType=...); a `PartitionName=` line replaces the default partition."""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    munge_dir: Path | None = None
    watchdog: subprocess.Popen | None = None

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}

    def names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def _write_config(self, socket_path: Path) -> None:
        host = socket.gethostname().split(".")[0]
        ctld, *slurmd = free_ports(1 + self.nodes)
        mem = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) // 1024
        b = self.base
        lines = [
            "ClusterName=scaletest", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd[0]}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
            "CredType=cred/munge", f"AuthInfo=socket={socket_path}", "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SwitchType=switch/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "SchedulerType=sched/backfill",
            # nodes may declare more CPUs than the machine has; a job's state stays queryable 60 s
            "SlurmdParameters=config_overrides", "ReturnToService=2", "KillWait=5", "MinJobAge=3600",
            "MailProg=/bin/true", f"StateSaveLocation={b}/state", f"SlurmdSpoolDir={b}/spool/%n",
            f"SlurmctldPidFile={b}/run/slurmctld.pid", f"SlurmdPidFile={b}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={b}/log/slurmctld.log", f"SlurmdLogFile={b}/log/slurmd-%n.log",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
        ]
        for name, port in zip(self.names(), slurmd):
            lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={self.cpus} RealMemory={mem} State=UNKNOWN")
        lines += [ln for ln in self.extra if not ln.startswith("PartitionName=")]
        lines += [ln for ln in self.extra if ln.startswith("PartitionName=")] or [
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]
        self.conf.write_text("\n".join(lines) + "\n")
        self.conf.chmod(0o644)

    @property
    def pids_file(self) -> Path:
        return self.base / "run" / "daemons.pids"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with open(self.base / "log" / f"{name}.out", "wb") as log:
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                env=self.env, start_new_session=True)
        lines = [f"{n} {p.pid} {start_time(p.pid)}" for n, p in self.procs.items() if start_time(p.pid)]
        tmp = self.pids_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{ln}\n" for ln in lines))
        os.replace(tmp, self.pids_file)  # the watchdog reads it whole

    def _start_watchdog(self) -> None:
        """The watchdog of this process (the test's), before any daemon starts."""
        me = os.getpid()
        with open(self.base / "log" / "watchdog.out", "wb") as log:
            self.watchdog = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("slurm_watchdog.py")), str(me), str(start_time(me)),
                 str(self.pids_file), str(self.munge_dir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self, timeout: float = 60.0) -> None:
        for d in ("etc", "state", "log", "run", *(f"spool/{n}" for n in self.names())):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        # munged wants every directory above its socket to be world-searchable (tmp_path is 0700)
        self.munge_dir = Path(tempfile.mkdtemp(prefix="scale-munge-", dir="/tmp"))
        self.munge_dir.chmod(0o755)
        sock = self.munge_dir / "munge.sock"
        key = self.base / "etc" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._write_config(sock)
        hosts = self.base / "etc" / "hosts"
        hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {' '.join(self.names())}\n")
        self._start_watchdog()
        try:
            self._spawn("munged", ["munged", "-F", f"--key-file={key}", f"--socket={sock}",
                                   f"--pid-file={self.base}/run/munged.pid", f"--seed-file={self.base}/run/munge.seed",
                                   f"--log-file={self.base}/log/munged.log"])
            self._wait(lambda: subprocess.run(["munge", "-S", str(sock), "-n"], check=False, capture_output=True).returncode == 0,
                       10, "munged did not answer")
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            for n in self.names():
                self._spawn(f"slurmd-{n}", [
                    "unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$0" /etc/hosts && exec slurmd -D -N "$1" -f "$2"', str(hosts), n, str(self.conf)])
            self._wait(lambda: self.idle() == self.nodes, timeout, "nodes did not become idle")
        except BaseException:
            self.stop()
            raise

    def idle(self) -> int:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, capture_output=True, text=True, env=self.env)
        return len({ln.split()[0] for ln in r.stdout.splitlines() if ln.split()[1:] == ["idle"]})

    def _wait(self, ready, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"Slurm test cluster: {what} (exited: {dead}); logs:\n{self.logs()}")
            time.sleep(0.2)

    def logs(self, tail: int = 15) -> str:
        out = []
        for f in sorted((self.base / "log").glob("*")):
            out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-tail:]))
        return "\n".join(out)

    def submit(self, script: str, *flags: str, env: dict[str, str], cwd: str) -> str:
        r = subprocess.run(["sbatch", "--parsable", *flags, script], check=False, capture_output=True, text=True,
                           env={**env, **{k: v for k, v in self.env.items() if k in ("SLURM_CONF", "PATH")}},
                           cwd=cwd, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr}")
        return r.stdout.strip().split(";")[0]

    def run(self, *cmd: str) -> str:
        """A client command (scontrol, scancel, ...) against this cluster; its stdout, or an error."""
        r = subprocess.run(list(cmd), check=False, capture_output=True, text=True, env=self.env, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def show_job(self, job: str) -> dict[str, str]:
        """`scontrol show job -o JOB` as {field: value} (JobState, Reason, Restarts, StartTime, ...)."""
        line = self.run("scontrol", "show", "job", "-o", job)
        return dict(re.findall(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", line))

    def wait_job(self, job: str, timeout: float) -> tuple[str, str]:
        """(final state, exit code 'N:S') of a job, polled every second."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = subprocess.run(["scontrol", "show", "job", "-o", job], check=False, capture_output=True, text=True, env=self.env)
            state = re.search(r"JobState=(\S+)", r.stdout)
            if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED"):
                return state.group(1), re.search(r"ExitCode=(\S+)", r.stdout).group(1)  # type: ignore[union-attr]
            time.sleep(1.0)
        subprocess.run(["scancel", job], env=self.env, check=False, capture_output=True)
        raise TimeoutError(f"job {job} did not finish in {timeout:.0f} s; logs:\n{self.logs()}")

    def stop(self) -> None:
        """Cancel jobs, then stop the daemons this object started (by PID), slurmd first; the
        watchdog first of all (the daemons are stopped here)."""
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait(timeout=10)
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            subprocess.run(["scancel", "--user=root"], env=self.env, check=False, capture_output=True, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                r = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, check=False, capture_output=True, text=True)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.3)
        order = [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        if self.munge_dir is not None:
            shutil.rmtree(self.munge_dir, ignore_errors=True)


TIMING = {"step_time", "tokens_per_s", "start_iteration", *TIMED_FIELDS}  # what may differ between two equal runs


def comparable_metrics(recs: list[dict], work: Path) -> list[dict]:
    """A run's metrics.jsonl records as two equal runs in different work folders write them (the
    Slurm tests' comparisons): timings dropped, and the start record's evaluation sets named from
    the work folder ($WORKDIR) rather than by its path."""
    out = []
    for r in recs:
        r = {k: v for k, v in r.items() if k not in TIMING}
        if "eval_data" in r:
            r["eval_data"] = {k: v.replace(str(work), "$WORKDIR") for k, v in r["eval_data"].items()}
        out.append(r)
    return out

"""Kills at any moment, at length: SIGKILL training launches at seeded fault points and resume
them from what is on disk, checking every trial against the uninterrupted run (the harness is
megatron_scale/testing/kills.py; CI runs one trial per method in tests/training/test_kills.py).

    python tools/kill_trials.py --trials 50 --seed 0
    python tools/kill_trials.py --trials 14 --methods scale-adapt lora --workdir /tmp/kills

Methods rotate over the trials; the first kill of each trial cycles through the fault points in
seeded order, and each resume is killed again with probability --resume-kill. Prints a line per
trial and the tables of results/2026-11-24-kill-trials; exits 1 at the first trial that fails its
checks.
Needs Linux (/proc).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from megatron_scale.testing.kills import METHODS, Trial, run_trials, table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=len(METHODS), help="trials to run (default: one per method)")
    p.add_argument("--seed", type=int, default=0, help="seeds every draw (fault point, k, rank, resume kills)")
    p.add_argument("--resume-kill", type=float, default=0.3, help="probability a resume is killed too (default 0.3)")
    p.add_argument("--max-kills", type=int, default=5, help="kills per trial at most (default 5)")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="methods to rotate over")
    p.add_argument("--workdir", type=Path, help="where runs go (default: a temporary directory, removed after)")
    a = p.parse_args()
    if a.trials < 1:
        p.error("--trials must be at least 1")
    if not 0 <= a.resume_kill < 1:
        p.error("--resume-kill must lie in [0, 1)")
    if a.max_kills < 1:
        p.error("--max-kills must be at least 1")
    start = time.monotonic()

    def progress(t: Trial) -> None:
        kills = ", ".join(f"{k['point']} (k={k['k']}, rank {k['rank']}, after iteration {k['iteration']})" for k in t.kills)
        print(f"trial {progress.n:3d} {t.method:14s} launches {len(t.launches)}: killed at {kills}; "
              f"resumed bitwise  [{time.monotonic() - start:.0f} s]", flush=True)
        progress.n += 1

    progress.n = 0  # type: ignore[attr-defined]  # a counter kept on the function object
    with tempfile.TemporaryDirectory(dir=a.workdir and str(a.workdir)) as root:
        try:
            trials = run_trials(Path(root), a.trials, a.seed, a.resume_kill, a.max_kills, tuple(a.methods), progress)
        except AssertionError as e:
            print(f"FAILED: {e}", file=sys.stderr)
            sys.exit(1)
    print(f"\n{len(trials)} trials, {sum(len(t.launches) for t in trials)} launches, seed {a.seed}, "
          f"{time.monotonic() - start:.0f} s\n")
    print(table(trials))


if __name__ == "__main__":
    main()

"""Where the recipe is: "step k of N", the time so far, and an estimate of what is left.

Every action the launcher runs (not one it skips) is timed: `started()` notes its start in
$WORKDIR/timings/KEY.start with the work it has to do (a training: its iterations left; anything
else: 1), and `ended()`, when the launcher asks for the next action or exits, turns that into
$WORKDIR/timings/KEY.json (seconds, work, and the action's kind) if the action is now done, and
drops it otherwise (a stopped step's time says nothing about a whole one). What is left is then each action still to
do, costed by the actions of its kind already timed in this WORKDIR (trainings per iteration,
each method's separately when it has been timed, else all trainings together), else by
STEP_SECONDS, the config's own measurements on a reference machine (the demo configs carry the
2-core machine's), else it is counted as not yet timed. A second run into the same WORKDIR
therefore estimates from the first.

Standard library only, like the rest of the launcher's side.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from megatron_scale.artifacts import TIMING
from megatron_scale.durable import atomic_write
from megatron_scale.recipe.command import Key


@dataclass(frozen=True)
class Timed:
    """One timed action: its seconds, the work it did (iterations for a training, else 1), and its
    kind (Key.kind; None in a file written before timings recorded it: then it costs only itself)."""

    seconds: float
    work: int
    kind: str | None = None


class Timings:
    """The timed actions of one WORKDIR ($WORKDIR/timings)."""

    def __init__(self, workdir: Path, now: Callable[[], float] = time.time) -> None:
        self.workdir, self.now = Path(workdir), now
        self.dir = TIMING.folder(workdir)

    def started(self, key: Key, work: int) -> None:
        _write_json(self.dir / f"{key}.start", {"t": self.now(), "work": work})

    def ended(self, key: Key, done: bool) -> None:
        """The action `key` ended: keep its time if it finished (`done`), forget its start either way."""
        start = self.dir / f"{key}.start"
        try:
            got = json.loads(start.read_text())
            t0, work = float(got["t"]), int(got["work"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if done and work > 0:
            _write_json(TIMING.path(self.workdir, key=str(key)),
                        {"seconds": round(self.now() - t0, 1), "work": work, "kind": key.kind})
        start.unlink(missing_ok=True)

    def read(self) -> dict[str, Timed]:
        """The timed actions, by key (its text: the file's name)."""
        out: dict[str, Timed] = {}
        for p in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            try:
                got = json.loads(p.read_text())
                kind = got.get("kind")
                out[p.stem] = Timed(float(got["seconds"]), int(got["work"]), kind if isinstance(kind, str) else None)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
        return out


def estimate(left: Mapping[Key, int], timed: Mapping[str, Timed], hints: Mapping[str, float]) -> tuple[float, int]:
    """Seconds for the actions in `left` (key -> work: iterations for a training, else 1), and how
    many of them nothing could cost. An action is costed by its own key's rate when it was timed
    (a resumed training), else its kind's over every timed action of that kind, else the hint."""
    by_kind: dict[str, list[Timed]] = {}
    for t in timed.values():
        if t.kind is not None:
            by_kind.setdefault(t.kind, []).append(t)
    seconds, unknown = 0.0, 0
    for key, work in left.items():
        same = [timed[str(key)]] if str(key) in timed else by_kind.get(key.kind, [])
        if same:
            seconds += work * sum(t.seconds for t in same) / sum(t.work for t in same)
        elif key.kind in hints:
            seconds += work * hints[key.kind]
        else:
            unknown += 1
    return seconds, unknown


def duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def where(k_step: int, n_steps: int, started_at: float | None, left_s: float, unknown: int,
          now: Callable[[], float] = time.time) -> str:
    """The header's progress: 'step 5 of 12 · 3 min 10 s so far · about 9 min 20 s left'."""
    parts = [f"step {k_step} of {n_steps}"]
    if started_at is not None:
        parts.append(f"{duration(now() - started_at)} so far")
    if unknown:
        untimed = f"{unknown} step{'s' if unknown > 1 else ''} of a kind not timed yet"
        parts.append(f"at least {duration(left_s)} left ({untimed})" if left_s else f"time left not known yet ({untimed})")
    else:
        parts.append(f"about {duration(left_s)} left")
    return " · ".join(parts)


def job_start(env: Mapping[str, str]) -> float | None:
    """When this job started (SCALE_JOB_START, set by examples/scale_korean.sh), if known."""
    try:
        return float(env["SCALE_JOB_START"])
    except (KeyError, ValueError):
        return None


def _write_json(path: Path, obj: object) -> None:
    atomic_write(path, json.dumps(obj))

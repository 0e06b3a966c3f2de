"""What a SCALE start costs before its first step: how often the checkpoint's records are read
(each read re-reads .metadata and stats every shard, records.py) and how often the SCALE geometry
is resolved against the base (each resolve checks every size again and logs its size notes).

One rank runs the entry's own `setup` (plan, build, first weights, optimizer, data) with the
counters wrapped around `records.read_records` (every module that imported it) and
`ScaleConfig.resolve`: once starting from an upscaled SCALE checkpoint, once resuming the run
checkpoint that start saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._dist import run_ranks
from tests.training._runs import RUN, make_dataset

pytestmark = pytest.mark.dist


def _counted_setup(rank: int, world: int, argv: list[str], save: bool) -> dict[str, int]:
    import sys

    from megatron_scale import records
    from megatron_scale.config import ScaleConfig
    from megatron_scale.training import loop
    from megatron_scale.training.config import parse

    counts = {"read_records": 0, "resolve": 0}
    reader, resolve = records.read_records, ScaleConfig.resolve

    def counted_read(*args: Any, **kwargs: Any) -> Any:
        counts["read_records"] += 1
        return reader(*args, **kwargs)

    def counted_resolve(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["resolve"] += 1
        return resolve(self, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("megatron_scale") and getattr(module, "read_records", None) is reader:
            module.read_records = counted_read  # type: ignore[attr-defined]
    ScaleConfig.resolve = counted_resolve  # type: ignore[method-assign]
    run = loop.setup(parse(argv))
    at_setup = dict(counts)
    if save:  # one step, so that the run checkpoint holds optimizer state to resume
        loop.train_step(run)
        run.save()
    return at_setup


@pytest.fixture(scope="module")
def upscaled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from megatron_scale.config import ScaleConfig
    from megatron_scale.convert import convert_hf_to_megatron, upscale_checkpoint
    from tests.convert import _hf

    root = tmp_path_factory.mktemp("plan")
    _hf.make_hf(root / "hf", tied=True)
    convert_hf_to_megatron(root / "hf", root / "base", tp=1, progress=False)
    upscale_checkpoint(root / "base", root / "up", ScaleConfig(variant="preserve", seed=5), tp=1)
    return {"base": str(root / "base"), "up": str(root / "up"), "data": make_dataset(root / "ko", seed=1), "run": str(root / "run")}


def test_record_reads_and_geometry_resolves_per_scale_start(upscaled: dict) -> None:
    argv = [*RUN, "--train-iters", "4", "--data-path", upscaled["data"], "--method", "scale-preserve"]
    start = run_ranks(_counted_setup, 1, [*argv, "--load", upscaled["up"], "--save", upscaled["run"]], True)[0]
    resume = run_ranks(_counted_setup, 1, [*argv, "--load", upscaled["run"]], False)[0]
    # The plan reads the records once and hands them on; the recorded geometry is the method, so
    # nothing resolves it again (main at 8fee6e0, before the method protocol: 3 reads and 3
    # resolves starting, 2 reads and 3 resolves resuming).
    assert start == {"read_records": 1, "resolve": 0}, start
    assert resume == {"read_records": 1, "resolve": 0}, resume


def test_a_start_from_a_base_resolves_the_geometry_once(upscaled: dict) -> None:
    argv = [*RUN, "--train-iters", "4", "--data-path", upscaled["data"], "--method", "scale-preserve"]
    base = run_ranks(_counted_setup, 1, [*argv, "--load", upscaled["base"]], False)[0]
    assert base == {"read_records": 1, "resolve": 1}, base

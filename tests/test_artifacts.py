"""megatron_scale/artifacts.py: each file the recipe's steps pass on says where it lives and
whether it is current from what the file holds."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from megatron_scale import artifacts
from megatron_scale.durable import atomic_write


def test_each_file_says_whether_it_is_current(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "full"
    marker = artifacts.TRACKER.path(tmp_path, method="full")
    assert marker == run / "latest_checkpointed_iteration.txt"
    assert not artifacts.TRACKER.current(marker, 1) and artifacts.saved_iterations(run) == 0
    run.mkdir(parents=True)
    marker.write_text("40\n")
    assert artifacts.TRACKER.current(marker, 40) and not artifacts.TRACKER.current(marker, 41)

    sizes = artifacts.TEXT_BYTES.path(tmp_path)
    assert not artifacts.TEXT_BYTES.current(sizes, "tok", {"en": "/d/en"})  # missing
    atomic_write(sizes, json.dumps({"tokenizer": "tok", "sets": {"en": {"prefix": "/d/en", "bytes": 3}}}))
    assert artifacts.TEXT_BYTES.current(sizes, "tok", {"en": "/d/en"})
    assert not artifacts.TEXT_BYTES.current(sizes, "other", {"en": "/d/en"})
    assert not artifacts.TEXT_BYTES.current(sizes, "tok", {"en": "/d/en", "ko": "/d/ko"})
    sizes.write_text("{not json")
    assert not artifacts.TEXT_BYTES.current(sizes, "tok", {"en": "/d/en"})

    scores = artifacts.BENCHMARK.path(tmp_path, model="base")
    atomic_write(scores, json.dumps({"checkpoint": "/c", "limit": 50, "results": {"b": {}, "a": {}}}))
    assert artifacts.BENCHMARK.current(scores, "/c", ["a", "b"], 50)
    assert not artifacts.BENCHMARK.current(scores, "/c", ["a"], 50)
    assert not artifacts.BENCHMARK.current(scores, "/c", ["a", "b"], None)

    sweep = artifacts.SWEEP.path(tmp_path, method="scale-route")
    atomic_write(sweep, json.dumps({"settings": {"load": "/c", "samples": 4, "extra": 1}}))
    assert artifacts.SWEEP.current(sweep, {"load": "/c", "samples": 4})
    assert not artifacts.SWEEP.current(sweep, {"load": "/c", "samples": 8})

    metrics = artifacts.METRICS.path(tmp_path, method="full")
    metrics.write_text("{}\n")
    results = artifacts.RESULTS.path(tmp_path)
    atomic_write(results, json.dumps({"runs": [{"method": "full"}], "failed": {"lora": "why"}}))
    assert artifacts.RESULTS.current(results, ["full"], {"lora": "why"}, [metrics])
    assert not artifacts.RESULTS.current(results, ["full"], {}, [metrics])
    os.utime(metrics, (time.time() + 5,) * 2)  # an input newer than the report
    assert not artifacts.RESULTS.current(results, ["full"], {"lora": "why"}, [metrics])

    hf = tmp_path / "hf" / "full"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    out = artifacts.GENERATIONS.path(tmp_path)
    atomic_write(out, json.dumps({"full": {}}))
    assert artifacts.GENERATIONS.current(out, {"full": hf})
    assert not artifacts.GENERATIONS.current(out, {"base": tmp_path, "full": hf})  # another model, or order
    assert all(a.writer and a.readers and a.holds for a in artifacts.ARTIFACTS)


def test_only_the_registry_spells_the_passed_on_file_names() -> None:
    """Writers and readers take a passed-on file's path from the registry (Artifact.path / .name):
    outside megatron_scale/artifacts.py no package module or tool spells these names as a string."""
    import re

    repo = Path(artifacts.__file__).resolve().parents[1]
    spelled = re.compile(r'"(sweep|results|generations|text_bytes)\.json"')
    files = sorted([*(repo / "megatron_scale").rglob("*.py"), *(repo / "tools").rglob("*.py")])
    assert len(files) > 50
    hits = [f"{p.relative_to(repo)}:{n}" for p in files if p.name != "artifacts.py"
            for n, line in enumerate(p.read_text().splitlines(), 1) if spelled.search(line)]
    assert hits == []
    assert spelled.search('where="report/x", name="results.json"')  # the pattern has teeth

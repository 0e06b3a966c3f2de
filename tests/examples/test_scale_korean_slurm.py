"""`sbatch examples/scale_korean.sh` under a real Slurm (tests/examples/slurm_cluster.py: two
emulated nodes on this machine, 1 task each), in the script's tiny mode cut short: demo corpora,
a tiny base pre-trained on English, upscaled, SCALE-Preserve on Korean at TP=2 across the two
nodes (gloo), the report, and the Hugging Face export verified against the Megatron model."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.examples.slurm_cluster import (
    SlurmCluster,
    SlurmUnavailable,
    ensure_slurm,
    free_ports,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    try:
        ensure_slurm()
    except SlurmUnavailable as e:
        pytest.skip(f"no Slurm test cluster: {e}")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2)
    c.start()
    yield c
    c.stop()
    alive = [n for n, p in c.procs.items() if p.poll() is None]
    assert not alive, f"daemons still running after stop: {alive}"


def test_sbatch_tiny_pipeline_on_two_nodes(cluster: SlurmCluster, tmp_path: Path) -> None:
    work = tmp_path / "work"
    out = tmp_path / "job.out"
    env = {
        "PYTHON": sys.executable, "WORKDIR": str(work), "METHODS": "scale-preserve",
        "SCALE_CONFIG": str(REPO / "examples" / "configs" / "tiny-cpu.env"),
        "BASE_ITERS": "4", "TRAIN_ITERS": "4", "WARMUP_ITERS": "1", "SAVE_INTERVAL": "4",
        "EVAL_ITERS": "1", "LOG_INTERVAL": "1", "OMP_NUM_THREADS": "1",
        "MASTER_PORT": str(free_ports(1)[0]),  # not the script's job-id default: other runs may share the host
    }
    # the header asks for 8 GPUs x 8 tasks per node; sbatch's own flags override it
    job = cluster.submit(str(REPO / "examples" / "scale_korean.sh"), "--nodes=2", "--ntasks-per-node=1",
                         "--cpus-per-task=1", "--gpus-per-node=0", "--time=00:15:00", f"--output={out}",
                         env=env, cwd=str(REPO))
    state, code = cluster.wait_job(job, timeout=900)
    text = out.read_text() if out.exists() else "(no job output)"
    assert (state, code) == ("COMPLETED", "0:0"), f"{state} {code}\n{text[-6000:]}"

    # the job spans both nodes; MASTER_ADDR is the first node's name (resolvable in the job)
    assert re.search(rf"job {job}: nodes n\[1-2\], 2 tasks, master n1:\d+", text), text[-4000:]
    # every srun step placed rank 0 on n1 and rank 1 on n2, and the TP=2 gloo group trained
    assert re.search(r"rank 0 of 2 on node n1 \(local rank 0\), master n1:", text), text[-4000:]
    assert re.search(r"rank 1 of 2 on node n2 \(local rank 0\), master n1:", text), text[-4000:]
    iterations = re.findall(r"iteration\s+(\d+)/\s*4 \|.*lm loss: (\S+)", text)
    assert [i for i, _ in iterations] == ["1", "2", "3", "4"] * 2, text[-4000:]  # base, then preserve
    assert all(float(loss) > 0 for _, loss in iterations)

    results = json.loads((work / "report" / "results.json").read_text())
    assert [r["method"] for r in results["runs"]] == ["scale-preserve"]
    assert (work / "report" / "perplexity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (work / "runs" / "scale-preserve" / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    exported = json.loads((work / "hf" / "scale-preserve" / "config.json").read_text())
    assert "auto_map" in exported, exported
    assert re.search(r'"verify_max_abs_error": [0-9.e-]+', text), text[-4000:]
    # the last step: greedy English and Korean continuations of the export
    samples = json.loads((work / "report" / "generations.json").read_text())
    assert list(samples) == ["scale-preserve"] and set(samples["scale-preserve"]) == {"en", "ko"}
    assert all(s["text"] for lang in samples["scale-preserve"].values() for s in lang)

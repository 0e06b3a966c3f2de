"""The device audit (megatron_scale/testing/device_audit.py): on the CPU backend, code that would leave a
tensor on the host where a GPU run needs it on the device fails here, on the CPU, naming where the
tensor was made.

Each check runs in a fresh subprocess (the backend patches torch process-wide):
- the rules, one by one: a host tensor meeting a parameter on the device raises (naming the line
  that made it), moving it fixes it, 0-dim scalars and indexing pass, `.cpu()` of a parameter does
  not demote the parameter, a module built on the host must be moved, collectives refuse host
  tensors on device groups and take them on gloo groups, a pickled tensor (torch.save, a
  checkpoint's common state) leaves its tag behind; MEGATRON_SCALE_DEVICE_AUDIT=0 turns it off;
- the real training step with its one batch move undone (data/batches.py `to_device` replaced by
  the identity) fails on its first forward, naming data/batches.py, while the step as shipped
  trains, evaluates and saves under the audit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from megatron_scale.testing.runs import MODEL, make_dataset

ROOT = Path(__file__).resolve().parents[1]

RULES = """
import json, os, torch, torch.distributed as dist
import torch.nn.functional as F
from megatron_scale.cpu_backend import resolve_device
from megatron_scale.testing.device_audit import DeviceAuditError

resolve_device("cpu")
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except DeviceAuditError as e:
        out[name] = str(e)

w = torch.nn.Parameter(torch.randn(5, 3, device="cuda"))
ids = torch.tensor([0, 1, 4])
attempt("host_ids", lambda: F.embedding(ids, w))
attempt("moved_ids", lambda: F.embedding(ids.to("cuda"), w))
attempt("ids_on_w_device", lambda: F.embedding(ids.to(w.device), w))
attempt("scalar", lambda: w * torch.tensor(2.0))
attempt("indexing", lambda: w[ids])
w.cpu()
attempt("after_cpu_copy", lambda: F.embedding(torch.zeros(2, dtype=torch.long, device="cuda"), w))
host_copy = w.detach().cpu()
attempt("host_copy", lambda: w + host_copy)
lin = torch.nn.Linear(3, 3)
x = torch.randn(2, 3, device="cuda")
attempt("host_module", lambda: lin(x))
lin.to("cuda")
attempt("moved_module", lambda: lin(x))
import io
saved = io.BytesIO()
torch.save({"step": torch.tensor(6.0, device="cuda"), "ids": ids}, saved)
out["tag_pickled"] = b"_megatron_scale_placed" in saved.getvalue()

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
gloo = dist.new_group([0], backend="gloo")
attempt("allreduce_host", lambda: dist.all_reduce(torch.zeros(2)))
attempt("allreduce_device", lambda: dist.all_reduce(torch.zeros(2, device="cuda")))
attempt("allreduce_host_on_gloo", lambda: dist.all_reduce(torch.zeros(2), group=gloo))
attempt("broadcast_host", lambda: dist.broadcast(torch.zeros(2), src=0))
dist.destroy_process_group()
print(json.dumps(out))
"""


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    from megatron_scale.distributed import free_port

    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PORT": str(free_port()), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env=full_env, cwd=ROOT)


def test_audit_rules_and_messages() -> None:
    done = _python(RULES)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    # a host tensor meeting the device: refused, naming the call, the maker and its line
    assert "torch.nn.functional.embedding" in r["host_ids"] and "host tensor (made by torch.tensor at <string>:" in r["host_ids"]
    line = int(r["host_ids"].split("made by torch.tensor at <string>:")[1].split(")")[0])
    assert RULES.splitlines()[line - 1].startswith("ids = torch.tensor"), line
    assert "host tensor (made by Tensor.cpu" in r["host_copy"]
    assert "host tensor" in r["host_module"]
    for ok in ("moved_ids", "ids_on_w_device", "scalar", "indexing", "after_cpu_copy", "moved_module",
               "allreduce_device", "allreduce_host_on_gloo"):
        assert r[ok] == "ok", (ok, r[ok])
    assert "torch.distributed.all_reduce" in r["allreduce_host"] and "device group" in r["allreduce_host"]
    assert "torch.distributed.broadcast" in r["broadcast_host"]
    assert r.pop("tag_pickled") is False  # a checkpoint never carries where this process put a tensor


def test_audit_can_be_switched_off() -> None:
    done = _python(RULES, MEGATRON_SCALE_DEVICE_AUDIT="0")
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r.pop("tag_pickled") is False
    assert set(r.values()) == {"ok"}


STEP = """
import json, os, sys
from megatron_scale.testing.device_audit import DeviceAuditError
from megatron_scale.distributed import destroy_distributed
from megatron_scale.data import batches
from megatron_scale.training import loop
from megatron_scale.training.config import parse

os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
config = parse(json.loads(sys.argv[1]))
if sys.argv[2] == "undo-move":
    batches.to_device = lambda batch, device: batch
run = loop.setup(config)
try:
    loop.train_step(run)
    loop.evaluate(run)
    run.save()
    print("trained")
except DeviceAuditError as e:
    print("AUDIT", e)
finally:
    destroy_distributed()
"""


def test_a_batch_left_on_the_host_fails_the_real_training_step(tmp_path: Path) -> None:
    prefix = make_dataset(tmp_path / "ds", seed=0, docs=60)
    argv = [*MODEL, "--data-path", prefix, "--train-iters", "3", "--method", "scale-preserve",
            "--eval-iters", "1", "--save", str(tmp_path / "ckpt")]
    shipped = _python(STEP.replace("sys.argv[1]", repr(json.dumps(argv))).replace("sys.argv[2]", "'as-shipped'"))
    assert shipped.returncode == 0 and shipped.stdout.strip().endswith("trained"), shipped.stdout + shipped.stderr[-3000:]
    undone = _python(STEP.replace("sys.argv[1]", repr(json.dumps(argv))).replace("sys.argv[2]", "'undo-move'"))
    last = undone.stdout.strip().splitlines()[-1]
    assert last.startswith("AUDIT device audit:"), undone.stdout[-2000:] + undone.stderr[-3000:]
    assert "data/batches.py" in last and "host tensor" in last, last

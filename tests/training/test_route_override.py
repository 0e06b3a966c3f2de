"""The training entry's evaluation-time router override (--route-tau), end to end: a SCALE-Route
run upscaled from a base and trained a few steps on another dataset, evaluated in the entry's own `evaluate` with tau = -1 (every token to
the preservation head) and tau = 2 (every token to the adaptation head) gives exactly the losses
of the two heads; at the model's own tau it is the model's routing, and the share routed to the
preservation head falls as tau rises. With the byte-level --tokenizer-model (tests/_unit_vocab.py)
and --route-unit, evaluation decides per character or per word: another routing than per token at
the same tau, the same as per token where every token goes one way (tau = -1, 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import _unit_vocab
from megatron_scale.testing.runs import MODEL, VOCAB, make_dataset

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.dist

EVALUATE = """
import json, os, sys
from megatron_scale.distributed import destroy_distributed
from megatron_scale.model.layers.heads import output_head
from megatron_scale.training import loop
from megatron_scale.training.config import parse

os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
base, route = json.loads(sys.argv[1]), json.loads(sys.argv[2])
run = loop.setup(parse(base))  # a base model to upscale: full training, saved
try:
    for _ in range(4):
        loop.train_step(run)
    run.save()
finally:
    destroy_distributed()
os.environ["MASTER_PORT"] = os.environ["PORT2"]
run = loop.setup(parse(route))
out = {}
try:
    for _ in range(4):
        loop.train_step(run)
    for tau in (None, -1.0, 0.0, 0.5, 0.9, 0.999, 2.0):  # None: the model's own (--scale-router-tau 0.999)
        run.config.logging.route_tau = tau
        out[str(tau)] = loop.evaluate(run)["en"]
    for unit in ("token", "char", "word"):
        run.config.logging.route_unit = unit
        for tau in (None, -1.0, 0.6, 0.7, 0.75, 0.8, 0.85, 2.0):
            run.config.logging.route_tau = tau
            out[f"{unit}/{tau}"] = loop.evaluate(run)["en"]
    run.config.logging.route_tau = run.config.logging.route_unit = None
    for head in ("preserve", "adapt"):
        with output_head(run.model, head):
            out[head] = loop.evaluate(run)["en"]
finally:
    destroy_distributed()
print(json.dumps(out))
"""


def test_route_tau_override_picks_the_heads(tmp_path: Path) -> None:
    from megatron_scale.distributed import free_port

    en = make_dataset(tmp_path / "en", seed=3, docs=80)
    ko = make_dataset(tmp_path / "ko", seed=4, docs=80)
    run = [*MODEL, "--train-iters", "4", "--eval-iters", "1", "--eval-data-path", f"en={en}"]
    base = [*run, "--method", "full", "--data-path", en, "--save", str(tmp_path / "base")]
    route = [*run, "--method", "scale-route", "--data-path", ko, "--load", str(tmp_path / "base" / "iter_0000004"),
             "--scale-router-tau", "0.999", "--lr", "3e-2", "--tokenizer-type", "HuggingFaceTokenizer",
             "--tokenizer-model", _unit_vocab.write_tokenizer(str(tmp_path / "tok"), _unit_vocab.pieces(VOCAB)),
             "--route-unit", "char"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PORT": str(free_port()), "PORT2": str(free_port()),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(EVALUATE), json.dumps(base), json.dumps(route)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["-1.0"]["preserve_fraction"] == 1.0 and r["-1.0"]["lm_loss"] == r["preserve"]["lm_loss"]
    assert r["2.0"]["preserve_fraction"] == 0.0 and r["2.0"]["lm_loss"] == r["adapt"]["lm_loss"]
    assert r["preserve"]["lm_loss"] != r["adapt"]["lm_loss"]  # trained: the heads differ
    # the override at the model's own tau is no override; a higher tau sends no more tokens to z_p
    assert r["0.999"] == r["None"]
    fractions = [r[str(t)]["preserve_fraction"] for t in (-1.0, 0.0, 0.5, 0.9, 0.999, 2.0)]
    assert fractions == sorted(fractions, reverse=True) and len(set(fractions)) > 1, fractions
    # the run's --route-unit char is what it evaluates with; token is the model's own routing
    assert r["token/None"] == r["None"]
    for unit in ("char", "word"):
        assert r[f"{unit}/-1.0"] == r["-1.0"] and r[f"{unit}/2.0"] == r["2.0"]
    split = [t for t in (0.6, 0.7, 0.75, 0.8, 0.85) if 0 < r[f"token/{t}"]["preserve_fraction"] < 1]
    assert split, "the test needs a tau routing tokens each way"
    assert any(r[f"char/{t}"] != r[f"token/{t}"] for t in split)  # one decision per character
    assert any(r[f"word/{t}"] != r[f"char/{t}"] for t in split)  # per word: fewer, longer units

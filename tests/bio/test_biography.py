"""The synthetic biography benchmark: the generator, the first-token evaluation on a hand-made
model, and a tiny end-to-end run of the protocol through tools/biography_benchmark.py."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from megatron_scale.bio import people as P
from megatron_scale.bio.evaluate import Probe, first_token_accuracy, probes
from megatron_scale.bio.texts import (
    ANSWER_PREFIX,
    QUESTIONS,
    TEMPLATES,
    all_qa,
    biographies,
    qa_pairs,
)

ROOT = Path(__file__).resolve().parents[2]


def test_people_are_deterministic_distinct_and_well_formed() -> None:
    a, b = P.generate_people(300, seed=7), P.generate_people(300, seed=7)
    assert a == b
    assert P.generate_people(100, seed=7) == a[:100]
    assert P.generate_people(300, seed=8) != a
    assert len({p.name for p in a}) == 300
    pools = {"birth_city": P.CITIES, "university": P.UNIVERSITIES, "major": P.MAJORS, "employer": P.EMPLOYERS}
    for key, pool in pools.items():
        assert len({v.split()[0] for v in pool}) == len(pool), f"{key}: first words repeat"
        assert all(p.attribute(key) in pool for p in a)
    for p in a:
        assert re.fullmatch(rf"({'|'.join(P.MONTHS)}) ([1-9]|1\d|2[0-8]), (19|20)\d\d", p.birth_date), p.birth_date
        assert p.employer_city == P.headquarters(p.employer)
    for key in P.ATTRIBUTES:  # every attribute takes several values in a few hundred people
        assert len({p.attribute(key) for p in a}) > 10


def test_biographies_state_every_attribute_and_qa_answers_match() -> None:
    people = P.generate_people(40, seed=3)
    bios = biographies(people, per_person=4, seed=5)
    assert bios == biographies(people, per_person=4, seed=5) and len(bios) == 160
    for key, templates in TEMPLATES.items():
        assert len(set(templates)) == len(templates) >= 3, key
    used: set[str] = set()
    for i, p in enumerate(people):
        for bio in bios[4 * i : 4 * i + 4]:
            sentences = re.split(r"(?<=\.) ", bio)
            assert len(sentences) == len(P.ATTRIBUTES)
            for key in P.ATTRIBUTES:
                value = p.attribute(key)
                hits = [s for s in sentences if value in s
                        and any(re.fullmatch(re.escape(t).replace(r"\{name\}", re.escape(p.name))
                                             .replace(r"\{value\}", re.escape(value)), s) for t in TEMPLATES[key])]
                assert hits, (key, bio)
                used.add(hits[0].replace(p.name, "{name}").replace(value, "{value}"))
        qas = qa_pairs(p)
        assert [q.attribute for q in qas] == list(P.ATTRIBUTES)
        for q in qas:
            assert q.prompt == QUESTIONS[q.attribute].format(name=p.name) + ANSWER_PREFIX
            assert q.answer == p.attribute(q.attribute) and q.answer in bios[4 * i]
            assert q.text == f"{q.prompt} {q.answer}."
    assert len(used) > 3 * len(P.ATTRIBUTES)  # several templates of each attribute appear
    assert len(all_qa(people)) == 6 * len(people)


class _WordTokenizer:
    """Each word or punctuation mark (with its leading space) one id."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.setdefault(w, len(self.vocab) + 1) for w in re.findall(r"\s*\w+|\s*[^\w\s]", text)]


class _NextTokenModel(nn.Module):
    """logits[b, s] put their maximum on table[token at s], or on token 0 where there is no entry;
    the output at a position depends on that position only (a trivially causal model)."""

    def __init__(self, table: dict[int, int], vocab: int = 64) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.table, self.vocab = table, vocab

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        assert mask.shape[-1] == tokens.shape[1] and mask.dtype == torch.bool
        out = torch.zeros(*tokens.shape, self.vocab)
        for b in range(tokens.shape[0]):
            for s in range(tokens.shape[1]):
                out[b, s, self.table.get(int(tokens[b, s]), 0)] = 1.0
        return out


def test_first_token_accuracy_on_a_hand_made_model() -> None:
    people = P.generate_people(3, seed=1)
    tok = _WordTokenizer()
    qas = [q for p in people for q in qa_pairs(p)][:9]
    items = probes(tok, qas)
    answer_tag = tok.encode(ANSWER_PREFIX)[-1]  # every prompt ends in "\nAnswer:"
    for it, q in zip(items, qas, strict=True):
        assert it.prompt[-1] == answer_tag and it.target == tok.encode(" " + q.answer.split()[0])[0]
    # the model answers with the first word of person 0's birth city after every prompt
    city = tok.encode(" " + people[0].birth_city)[0]
    model = _NextTokenModel({answer_tag: city})
    model.train()
    r = first_token_accuracy(model, items, batch_size=4)  # batches of unequal prompt lengths
    hits = [int(i.target == city) for i in items]
    assert r["accuracy"] == pytest.approx(sum(hits) / len(items)) and sum(hits) >= 1
    assert r["per_attribute"]["birth_city"] == pytest.approx(
        sum(h for h, i in zip(hits, items) if i.attribute == "birth_city") / 2)
    assert model.training  # the mode is restored
    # the position read is the prompt's last one: a model right only one step later scores 0
    shifted = [Probe(i.prompt + (7,), i.target, i.attribute) for i in items]
    assert first_token_accuracy(model, shifted)["accuracy"] == 0.0


def test_protocol_smoke_run_writes_json_table_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "bio"
    cmd = [sys.executable, str(ROOT / "tools" / "biography_benchmark.py"), "--preset", "cpu", "--out", str(out),
           "--methods", "full", "scale-route", "scale-preserve", "--pretrain-people", "16", "--task0-people", "8",
           "--task1-people", "4", "--bios-per-person", "2", "--vocab-size", "400", "--num-layers", "2",
           "--hidden-size", "64", "--num-attention-heads", "8", "--num-query-groups", "4", "--ffn-hidden-size", "128",
           "--seq-length", "32", "--micro-batch-size", "4", "--global-batch-size", "4", "--pretrain-iters", "6",
           "--task0-iters", "4", "--task1-iters", "4", "--eval-interval", "2", "--eval-dense-until", "2",
           "--eval-dense-interval", "1", "--routed-baselines"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["full", "scale-route", "scale-preserve"]
    assert results["data"]["task0_probes"] == 6 * 8 and results["data"]["task1_probes"] == 6 * 4
    t0_end = results["task0"]["accuracy"]["task0"][-1]
    for name, r in results["methods"].items():
        assert r["steps"] == [0, 1, 2, 4] and r["stopped_at"] is None  # dense to step 2, then every 2
        assert len(r["loss"]) == 4 and all(math.isfinite(x) for x in r["loss"])
        for key in ("task0", "task1"):
            assert all(0.0 <= v <= 1.0 for v in r["accuracy"][key])
        # every method starts from the task-0 model: the same answers before its first step
        assert r["accuracy"]["task0"][0] == pytest.approx(t0_end, abs=1 / 48 + 1e-9), name
    route = results["methods"]["scale-route"]
    assert route["preserve_fraction"]["task0"][0] is not None and results["methods"]["full"]["route"] == {}
    # the routed-baseline control: full's last evaluation against its step-0 model (the task-0 model)
    full = results["methods"]["full"]
    assert full["baseline_records"] and "router" in full
    for key in ("task0", "task1"):
        rec = full["final_records"][key]
        mean = lambda k, rec=rec: sum(rec[k]) / len(rec[k])  # noqa: E731
        assert mean("correct_p") == pytest.approx(full["accuracy"][key][0]) and rec["alpha/0/correct"] == rec["correct_p"]
        assert mean("correct_a") == pytest.approx(full["accuracy"][key][-1]) and rec["alpha/1/correct"] == rec["correct_a"]
        assert route["final_records"][key]["alpha/1/correct"] == route["final_records"][key]["correct_a"]
        # a Preserve run's records are its two heads: z_a is its own output, z_p the task-0 model
        pres = results["methods"]["scale-preserve"]
        rec = pres["final_records"][key]
        assert mean("correct_a") == pytest.approx(pres["accuracy"][key][-1]) and "baseline_records" not in pres
        assert sum(rec["correct_p"]) / len(rec["correct_p"]) == pytest.approx(full["accuracy"][key][0])
        assert rec["loss_a"] == route["final_records"][key]["loss_a"]  # Route trains exactly as Preserve
    controls = route["router"]["controls"]
    assert [p["rate"] for p in controls["random"]][:2] == [0.0, 0.05] and len(controls["alpha"]) == 21
    assert controls["random"][0]["task0"] == pytest.approx(route["router"]["heads"]["task0"]["z_p"])
    assert route["router"]["paper"]["direction"] == "above" and route["router"]["unit"].startswith("one decision per probe")
    for stat, dep in route["router"]["deployable"].items():
        assert [f["fold"] for f in dep["folds"]] == [0, 1] and 0.0 <= dep["task0"] <= 1.0, stat
    first = route["route"]["task0"][0]  # before any step z_a == z_p: every answer token kept on z_p
    assert first["answer_preserve_fraction"] == 1.0 and first["tau_sweep"]["-1.0"] == route["accuracy"]["task0"][0]
    assert first["preserve_head_accuracy"] == route["accuracy"]["task0"][0]
    for key in ("task0", "task1"):  # tau -1 always keeps z_p, tau > 1 always emits z_a
        for d, routed in zip(route["route"][key], route["accuracy"][key], strict=True):
            assert d["tau_sweep"]["-1.0"] == d["preserve_head_accuracy"]
            assert d["tau_sweep"]["1.01"] == d["adapt_head_accuracy"]
            assert d["tau_sweep"]["0.5"] == pytest.approx(routed, abs=2 / 24)  # the model's own tau
    # every router statistic analysed from the last evaluation's per-probe records
    analysis = route["router"]
    assert sorted(analysis["statistics"]) == sorted(["cosine", "centered-cosine", "max-prob", "certainty"])
    last = {k: route["route"][k][-1] for k in ("task0", "task1")}
    for stat, a in analysis["statistics"].items():
        assert 0.0 <= a["auc"] <= 1.0
        ends = a["points"][0], a["points"][-1]  # lowest tau: all on z_p; above the highest: all on z_a
        for key in ("task0", "task1"):
            assert ends[0][key] == pytest.approx(last[key]["preserve_head_accuracy"]), (stat, key)
            assert ends[1][key] == pytest.approx(last[key]["adapt_head_accuracy"]), (stat, key)
            assert ends[0][f"{key}_kept"] == 1.0 and ends[1][f"{key}_kept"] == 0.0
        assert a["calibration"]["old_kept"] >= 0.95
    table = (out / "table.md").read_text()
    assert table.count("\n| full |") == 1 and "| scale-route |" in table and table in done.stdout
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "router_scale-route.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| max-prob |" in table and "| cosine |" in table
    assert "--methods full scale-route" in results["command"]
    # what the new output columns add: nothing before the first step (W_out_up starts at zero),
    # something once trained; only SCALE methods have the term
    assert "expansion" not in results["methods"]["full"] or not results["methods"]["full"]["expansion"]
    e = route["expansion"]
    for key in ("task0", "task1"):
        assert len(e[key]) == 4 and e[key][0] == {"relative_norm": 0.0, "kl_p_to_a": 0.0, "argmax_changed": 0.0}
        assert e[key][-1]["relative_norm"] > 0 and e[key][-1]["kl_p_to_a"] >= 0
    assert "| scale-route | 4 |" in table and "KL from z_p to z_a" in table


def test_frontier_runs_every_method_at_every_lr_and_seed_and_summarises_them(tmp_path: Path) -> None:
    from megatron_scale.reports.frontier import Run, summarise

    out = tmp_path / "frontier"
    cmd = [sys.executable, str(ROOT / "tools" / "biography_benchmark.py"), "--preset", "cpu", "--out", str(out),
           "--methods", "full", "scale-route", "--task1-lrs", "1e-3", "1e-2", "--seeds", "3", "4",
           "--pretrain-people", "12", "--task0-people", "6", "--task1-people", "3", "--bios-per-person", "2",
           "--vocab-size", "400", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "8",
           "--num-query-groups", "4", "--ffn-hidden-size", "128", "--seq-length", "32", "--micro-batch-size", "4",
           "--global-batch-size", "4", "--pretrain-iters", "4", "--task0-iters", "2", "--task1-iters", "4",
           "--eval-interval", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seeds = {s: json.loads((out / f"seed{s}" / "results.json").read_text()) for s in (3, 4)}
    doc = json.loads((out / "frontier.json").read_text())
    runs = [Run(r["method"], r["lr"], r["seed"], tuple(tuple(p) for p in r["curve"])) for r in doc["runs"]]
    for seed, results in seeds.items():
        assert results["settings"]["seed"] == seed
        assert list(results["methods"]) == ["full@0.001", "full@0.01", "scale-route@0.001", "scale-route@0.01"]
        for key, r in results["methods"].items():
            (run,) = [x for x in runs if (x.method, x.lr, x.seed) == (r["method"], r["lr"], seed)]
            assert run.curve == tuple(zip(r["accuracy"]["task1"], r["accuracy"]["task0"], strict=True)), key
        assert results["methods"]["full@0.001"]["loss"] != results["methods"]["full@0.01"]["loss"]  # the LR took
        stats = results["methods"]["scale-route@0.01"]["router"]["statistics"]
        for stat, a in stats.items():  # each statistic's tau sweep is a frontier of its own
            (run,) = [x for x in runs if (x.method, x.lr, x.seed) == (f"scale-route[{stat}, ours]", 0.01, seed)]
            assert run.curve == tuple((p["task1"], p["task0"]) for p in a["points"])
            assert doc["curves"][f"scale-route[{stat}, ours]"]["direction_by_run"][f"seed {seed} lr 0.01"] == a["direction"]
    # per seed: 4 curves; per Route LR 4 statistics' sweeps, the paper's cosine, random and alpha mixing
    assert len(runs) == 2 * (4 + 2 * 7)
    assert set(doc["curves"]["scale-route[cosine, paper's]"]["direction_by_run"].values()) == {"above"}
    # the written summary is reports/frontier.py's on these curves
    summary = summarise(runs, doc["levels"])
    assert sorted(doc["summary"]) == sorted(summary) and "scale-route[cosine, ours]" in summary
    def same(written: dict, spread: object) -> None:
        for k, v in vars(spread).items():
            assert (list(written[k]) == list(v)) if isinstance(v, tuple) else written[k] == pytest.approx(v, nan_ok=True), k

    for method, s in summary.items():
        same(doc["summary"][method]["area"], s["area"])
        for level, v in s["levels"].items():
            same(doc["summary"][method]["levels"][str(level)], v)
    table = (out / "frontier.md").read_text()
    assert table in done.stdout and "| full | 2 |" in table and "task 0 at task 1 = 0.95" in table
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --from-stages runs nothing and gives the same frontier from the stage files alone
    staged = subprocess.run([*cmd[:6], "--from-stages"], capture_output=True, text=True, timeout=120, env=env,
                            cwd=ROOT, check=False)
    assert staged.returncode == 0 and "    step " not in staged.stdout, staged.stderr[-3000:]
    assert json.loads((out / "frontier.json").read_text()) == doc
    # a second call reads every finished stage instead of training it again, and says so
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("done before:") == 2 * 6 and "    step " not in again.stdout
    assert json.loads((out / "frontier.json").read_text()) == doc
    # a seed killed mid-way: only its unfinished stage runs again, and gives the same numbers
    seed4 = out / "seed4"
    (seed4 / "results.json").unlink()
    (seed4 / "stages" / "task1_full_lr0.01.json").unlink()
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count("done before:") == 2 * 6 - 1 and resumed.stdout.count("    step ") == 3  # 0, 2, 4
    again4 = json.loads((seed4 / "results.json").read_text())
    for key, r in seeds[4]["methods"].items():
        assert again4["methods"][key]["accuracy"] == r["accuracy"] and again4["methods"][key]["loss"] == r["loss"], key
    # stage files without the checkpoints (copied elsewhere): the two saving stages run again, the
    # same to the bit, and the task-1 stages are read
    shutil.rmtree(seed4 / "checkpoints")
    copied = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT, check=False)
    assert copied.returncode == 0, copied.stderr[-3000:]
    assert copied.stdout.count("done before:") == 2 * 6 - 2
    assert json.loads((seed4 / "results.json").read_text())["task0"]["accuracy"] == seeds[4]["task0"]["accuracy"]
    # stage files of other settings are never mixed in: one error naming the setting
    (seed3_results := out / "seed3" / "results.json").unlink()
    other = subprocess.run([*cmd, "--task1-iters", "6"], capture_output=True, text=True, timeout=120, env=env,
                           cwd=ROOT, check=False)
    assert other.returncode != 0 and "made by a run with other settings (task1_iters)" in other.stderr, other.stderr[-2000:]
    assert "Traceback" not in other.stderr
    assert not seed3_results.exists()
    bad = subprocess.run([*cmd[:6], "--task1-lrs", "1e-3", "0"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=ROOT, check=False)
    assert bad.returncode != 0 and "--task1-lrs must be distinct positive" in bad.stderr


def test_task1_evaluations_are_dense_early_and_stage_keys_hold_what_a_stage_reads() -> None:
    from megatron_scale.bio.eval_plan import EvalPlan
    from megatron_scale.bio.settings import Settings, protocol_method, stage_key

    plan = EvalPlan(50, dense_until=20, dense_interval=5)
    assert [s for s in range(1, 121) if plan.due(s, 120)] == [5, 10, 15, 20, 50, 100, 120]
    # adaptive: every 10 steps while task 1 moves by more than 0.1 per 50 steps (0.3 here), else every 50
    fast, slow = ((50, 0.1), (100, 0.4)), ((50, 0.1), (100, 0.15))
    adaptive = EvalPlan(50, dense_interval=10, dense_gap=0.1)
    assert adaptive.due(110, 800, fast) and not adaptive.due(110, 800, slow) and not adaptive.due(105, 800, fast)
    s = Settings(task1_iters=3000, task1_stop_at=0.95, eval_dense_until=200, routed_baselines=True,
                 method=dataclasses.replace(protocol_method(), lora_rank=64))
    # the pre-training and task-0 stages read no task-1 setting: a frontier adds runs of other caps to them
    assert stage_key(s) == stage_key(Settings())
    assert stage_key(s, "lora")["lora_rank"] == 64 and "freeze_layers" not in stage_key(s, "lora")
    assert stage_key(s, "full")["task1_stop_at"] == 0.95 and "lora_rank" not in stage_key(s, "full")
    assert "routed_baselines" in stage_key(s, "scale-preserve") and "routed_baselines" not in stage_key(s, "scale-route")


def test_a_gated_scale_stage_is_keyed_by_its_gate_and_the_others_are_not() -> None:
    """--gate-*: a SCALE stage trained through a gate is another stage than the ungated one; a run
    without a gate keys its stages by the gate's None (a stage file written before the gate existed,
    without those keys, reads them as None: it stays valid), and no other method reads the gate."""
    from megatron_scale.bio.settings import Settings, method_config, stage_key
    from megatron_scale.bio.variant import GATE

    plain = Settings(task1_iters=3000)
    scale = dataclasses.replace(plain.method.scale, gate_statistic="max-prob", gate_tau=0.8, gate_temperature=0.05)
    gated = dataclasses.replace(plain, method=dataclasses.replace(plain.method, scale=scale))
    assert {k: stage_key(plain, "scale-preserve")[k] for k in GATE} == dict.fromkeys(GATE)
    assert stage_key(gated, "scale-preserve")["gate_tau"] == 0.8
    assert stage_key(gated, "scale-preserve") != stage_key(plain, "scale-preserve")
    for method in ("full", "freeze", "lora", "llama-pro", None):
        assert stage_key(gated, method) == stage_key(plain, method), method
        assert not set(GATE) & set(stage_key(plain, method)), method
    scale = method_config(gated, "scale-preserve").scale
    assert (scale.gate_statistic, scale.gate_tau, scale.gate_temperature, scale.gate_direction) == (
        "max-prob", 0.8, 0.05, None)
    bad = dataclasses.replace(gated.method.scale, gate_temperature=0.0)
    with pytest.raises(ValueError, match="--scale-gate-temperature: must be a finite number > 0"):
        dataclasses.replace(gated, method=dataclasses.replace(gated.method, scale=bad)).check()


def test_gated_and_plain_stages_share_a_folder_and_a_table(tmp_path: Path) -> None:
    """A gated SCALE stage is filed and drawn as METHOD+gate-... (bio/variant.py), beside the plain
    method's stage in one folder; the table pairs it with its method, full fine-tuning and Freeze,
    seed by seed. Hand-made curves: the gated run keeps 0.2 more of task 0 at every level."""
    from megatron_scale.bio.variant import variant_tag
    from megatron_scale.reports.bio_frontier import runs_of_stages, write_frontier

    gate = {"gate_statistic": "max-prob", "gate_tau": 0.8, "gate_temperature": 0.05, "gate_direction": None}
    tag = variant_tag(gate, "scale-preserve")
    assert tag == "+gate-max-prob-0.8-0.05-above"
    assert variant_tag(gate, "full") == "" and variant_tag({"gate_statistic": None}, "scale-preserve") == ""
    task1 = [0.0, 0.3, 0.6, 0.9, 1.0]
    for seed in (1, 2):
        stages = tmp_path / f"seed{seed}" / "stages"
        stages.mkdir(parents=True)
        for name, settings, kept in (("scale-preserve", {}, 0.0), (f"scale-preserve{tag}", gate, 0.2),
                                     ("full", {}, -0.1), ("freeze", {}, -0.05)):
            task0 = [1.0] + [min(1.0, 0.7 - 0.4 * t + kept) for t in task1[1:]]
            doc = {"settings": {"seed": seed, "task1_people": 20, **settings},
                   "result": {"steps": [0, 10, 20, 30, 40], "accuracy": {"task0": task0, "task1": task1},
                              "final_records": None}}
            (stages / f"task1_{name}_lr0.001.json").write_text(json.dumps(doc))
    runs, settings, markers, info = runs_of_stages(str(tmp_path))
    assert sorted({r.method for r in runs}) == ["freeze", "full", "scale-preserve", f"scale-preserve{tag}"]
    write_frontier(runs, str(tmp_path), "hand-made")
    table = (tmp_path / "frontier.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith(f"| scale-preserve{tag} - scale-preserve |"))
    assert row.count("+0.200 [+0.200, +0.200]") == 3 and row.count("2/2 > 0") == 3, row
    assert f"| scale-preserve{tag} - full |" in table and f"| scale-preserve{tag} - freeze |" in table

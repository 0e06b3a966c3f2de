"""House rules that keep the codebase changeable, checked on the source itself:
- model code (megatron_scale.model and its subpackages, .upscale, .route_stats) imports nothing
  from training, data, the methods, the process group (distributed.py), the checkpoint wing or
  tools; the methods (megatron_scale.methods) nothing from training, data, conversion or tools;
- everything a checkpoint is on disk lives in checkpoint/, which stands on the model and never
  imports the methods; only it reads or writes a checkpoint's common state (megatron-core's
  dist_checkpointing); evaluation, the route sweep and training never import conversion;
- a method is asked, never named: no isinstance on the method classes and no comparison with a
  --method string outside megatron_scale/methods/;
- model/ by role: the layers (model/layers/) never import the builder (model/build.py) nor the
  checkpoint wing (checkpoint/); the checkpoint keys and state (model/weights/) import no layer and no
  builder; the route statistics (route_stats/) import no model code and no route sweep (route_eval/);
- every megatron.core import goes through megatron_scale/_mcore.py;
- only megatron_scale/distributed.py knows about the CPU backend;
- importing the package patches nothing (no import-time side effects on torch.cuda);
- the test machinery (megatron_scale.testing) is reached from production code only through the
  one hook, megatron_scale/hooks.py, and lazily; nothing in the package or tools imports tests/;
- the record analysis (route_eval/) and the reports (reports/) run no model: they reach none of the
  methods, the launcher, training, the runners (evaluation/), the checkpoint wing or conversion;
  only the training entry (train.py) and bio/ import training/; results/ scripts import nothing of
  the package;
- no cycle between rooms (the package's folders and top-level modules), function-level imports
  counted, and the package's rooms on at most 11 floors (tools/ the 12th); run records are read
  through megatron_scale/run_metrics.py, below them all;
- the recipe (recipe/) and the reports' tables import the standard library, each other and the
  package's standard-library floor only: tests/recipe/test_standard_library.py."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "megatron_scale"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _sources() -> list[Path]:
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 10
    return files


def test_megatron_core_only_through_the_gateway() -> None:
    offenders = [
        str(p.relative_to(PKG)) for p in _sources()
        if p.name != "_mcore.py" and any(n == "megatron.core" or n.startswith("megatron.core.") for n in _imports(p))
    ]
    assert offenders == []


def test_model_code_never_imports_training_code() -> None:
    """... nor the process group (distributed.py: the model stands below it) nor what stands on the
    model: the checkpoint wing, the launcher, conversion."""
    forbidden = ("megatron_scale.training", "megatron_scale.train", "megatron_scale.data", "megatron_scale.methods",
                 "megatron_scale.distributed", "megatron_scale.checkpoint", "megatron_scale.launch",
                 "megatron_scale.convert", "tools")
    roots = [PKG / "model", PKG / "upscale", PKG / "route_stats"]
    model_files = [p for p in _sources() if any(r in p.parents for r in roots)]
    assert len(model_files) > 20 and any(PKG / "model" / "layers" in p.parents for p in model_files)
    offenders = {
        str(p.relative_to(PKG)): sorted(n for n in _imports(p) if n.startswith(forbidden))
        for p in model_files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_methods_sit_between_the_model_and_training() -> None:
    """A method builds, freezes, loads and records a model (model/, upscale/, checkpoint.py); the
    plan and the loop (training/) and conversion (convert/) use the methods, never the reverse."""
    forbidden = ("megatron_scale.training", "megatron_scale.train", "megatron_scale.data", "megatron_scale.convert",
                 "megatron_scale.bio", "megatron_scale.recipe", "tools")
    files = [p for p in _sources() if p.parent.name == "methods"]
    assert len(files) >= 6
    offenders = {str(p.relative_to(PKG)): sorted(n for n in _imports(p) if n.startswith(forbidden)) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def _package_imports(under: Path) -> dict[str, set[str]]:
    files = [p for p in _sources() if under in p.parents]
    assert files, under
    return {str(p.relative_to(PKG)): {n for n in _imports(p) if n.startswith("megatron_scale")} for p in files}


def test_model_code_is_split_by_role() -> None:
    """Layers (model/layers/: megatron-core modules and specs) sit below the builder
    (model/build.py) and beside the checkpoint keys and state (model/weights/); the route
    statistics (route_stats/) are pure functions the router and the route sweeps share."""
    rules = {
        PKG / "model" / "layers": ("megatron_scale.model.build", "megatron_scale.checkpoint",
                                   "megatron_scale.methods", "megatron_scale.route_eval"),
        PKG / "model" / "weights": ("megatron_scale.model.layers", "megatron_scale.model.build",
                                    "megatron_scale.model.args", "megatron_scale.methods"),
        PKG / "route_stats": ("megatron_scale.model", "megatron_scale.route_eval", "megatron_scale.methods",
                              "megatron_scale.scale_config", "megatron_scale.scale_checks",
                              "megatron_scale.scale_options"),
    }
    offenders = {}
    for under, forbidden in rules.items():
        for name, deps in _package_imports(under).items():
            bad = sorted(d for d in deps if d.startswith(forbidden))
            if bad:
                offenders[name] = bad
    assert offenders == {}
    top = sorted(p.name for p in (PKG / "model").glob("*.py"))
    assert top == ["__init__.py", "args.py", "build.py", "flops.py", "inputs.py"]


METHOD_CATALOG = "method_catalog.py"
"""The one place outside methods/ that may spell the --method values: the recipe's stdlib view."""


def _method_name_comparisons(source: str, names: tuple[str, ...]) -> list[int]:
    """Lines of `source` that compare a value with a --method string (==, !=, in, a match case) or
    test one for a method-name prefix (startswith / removeprefix "scale-")."""
    prefixes = {n[: i + 1] for n in names for i, c in enumerate(n) if c == "-"}

    def named(node: ast.AST) -> bool:
        values = [node] if isinstance(node, ast.Constant) else getattr(node, "elts", [])
        return any(isinstance(v, ast.Constant) and (v.value in names or v.value in prefixes) for v in values)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(named(side) for side in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith", "removeprefix", "removesuffix")
              and any(named(a) for a in node.args)):
            lines.append(node.lineno)
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue) and named(node.pattern.value):
            lines.append(node.pattern.lineno)
    return sorted(lines)


def test_no_method_name_dispatch_outside_the_methods() -> None:
    """Each method class answers for itself (its traits: routes, scale_dims, exported_as, ...): no
    module outside megatron_scale/methods/ compares a --method value with a method's name (the
    recipe's catalog, method_catalog.py, is its one stdlib list of them)."""
    from megatron_scale.methods import NAMES

    offenders = {}
    for p in _sources():
        rel = str(p.relative_to(PKG))
        if p.parent.name == "methods" or rel == METHOD_CATALOG:
            continue
        lines = _method_name_comparisons(p.read_text(), NAMES)
        if lines:
            offenders[rel] = lines
    assert offenders == {}
    # the check has teeth: what bio/protocol.py and training/config.py used to write is caught
    probe = ('if method == "freeze" or name.startswith("scale-"):\n    pass\n'
             'if te and self.method.name in ("lora",):\n    pass\nmatch m:\n    case "full":\n        pass\n')
    assert _method_name_comparisons(probe, NAMES) == [1, 1, 3, 6]


def test_training_asks_the_method_never_the_scale_geometry() -> None:
    """SCALE's setup is its method's (TrainingMethod.attach: the route unit codes and the scoped
    output rows; flops_per_token; check_base_backward): no file under megatron_scale/training/
    names `scale_dims`, so the loop never reads the geometry off the model or the method."""
    training = sorted((PKG / "training").rglob("*.py"))
    assert len(training) > 5
    assert [str(p.relative_to(PKG)) for p in training if "scale_dims" in p.read_text()] == []


def test_no_isinstance_dispatch_on_methods() -> None:
    """Each method class answers for itself: no module tests which method it holds."""
    names = {"Scale", "Full", "Freeze", "LlamaPro", "Lora", "LoraSettings", "TrainingMethod"}
    offenders = []
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                kinds = node.args[1]
                found = {n.id for n in ast.walk(kinds) if isinstance(n, ast.Name)} & names
                if found:
                    offenders.append(f"{p.relative_to(PKG)}:{node.lineno} {sorted(found)}")
    assert offenders == []


def test_only_distributed_knows_the_cpu_backend() -> None:
    users = sorted(
        str(p.relative_to(PKG)) for p in _sources()
        if p.name != "cpu_backend.py" and any("cpu_backend" in n for n in _imports(p))
    )
    assert users == ["distributed.py"]


def test_test_machinery_is_reached_only_through_the_one_hook() -> None:
    """megatron_scale/testing/ (the device audit, fault points, kill harness) is imported by no
    production module but hooks.py, and there only inside the functions the environment switches
    on, so a run that arms nothing never loads it; the package and the tools import nothing from
    the repository's tests/."""
    testing = PKG / "testing"
    production = [p for p in _sources() if testing not in p.parents]
    assert len(production) > 50 and (testing / "faults.py").is_file() and (testing / "device_audit.py").is_file()
    users = sorted(str(p.relative_to(PKG)) for p in production
                   if any(n == "megatron_scale.testing" or n.startswith("megatron_scale.testing.") for n in _imports(p)))
    assert users == ["hooks.py"]
    hook = ast.parse((PKG / "hooks.py").read_text())
    top_level = [n for n in hook.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all("testing" not in (getattr(n, "module", None) or "") for n in top_level)
    tools = sorted((PKG.parent / "tools").glob("*.py"))
    importers = sorted(str(p.relative_to(PKG.parent)) for p in _sources() + tools
                       if any(n == "tests" or n.startswith("tests.") for n in _imports(p)))
    assert importers == []


def test_a_run_that_arms_nothing_never_loads_the_test_machinery() -> None:
    code = (
        "import os; [os.environ.pop(k, None) for k in ('MEGATRON_SCALE_FAULT', 'MEGATRON_SCALE_FAULT_COUNT')];"
        "import sys, megatron_scale.training.loop, megatron_scale.checkpoint, megatron_scale.hooks as h;"
        "h.point('forward'); h.optimizer_built(object())\n"
        "with h.checkpoint_writes('x'): pass\n"
        "bad = [m for m in sys.modules if m.startswith('megatron_scale.testing')]; assert not bad, bad; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
    from megatron_scale import hooks
    from megatron_scale.testing import faults

    assert (hooks.FAULT, hooks.FAULT_COUNT) == (faults.ARM, faults.COUNT)  # the hook's switches are the machinery's


def test_import_has_no_side_effects() -> None:
    code = (
        "import torch; before = (torch.cuda.current_device, torch.cuda.synchronize);"
        "import megatron_scale.model.build, megatron_scale.upscale, megatron_scale.checkpoint,"
        " megatron_scale.distributed, megatron_scale.cpu_backend;"
        "import sys; assert (torch.cuda.current_device, torch.cuda.synchronize) == before;"
        "bad = [m for m in sys.modules if m.startswith(('megatron_scale.training', 'megatron_scale.data'))];"
        "assert not bad, bad; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def _module_graph() -> dict[str, set[str]]:
    """Package module -> the package modules it imports (anywhere in the file: a function-level
    import that dodges a cycle is still one). `from pkg import name` is an edge to the submodule
    pkg.name where that is a module, else to pkg."""
    mods: dict[str, Path] = {}
    for p in _sources():
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in mods:
                subs = {f"{node.module}.{a.name}" for a in node.names} & mods.keys()
                deps.update(subs or {node.module})
                if len(subs) < len(node.names):
                    deps.add(node.module)
        graph[name] = deps - {name}
    return graph


def test_no_import_cycles() -> None:
    graph = _module_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_users_of_the_model_do_not_import_conversion() -> None:
    """Training, evaluation and the route sweep stand beside conversion on the methods: they open
    checkpoints through checkpoint/ and methods/load.py, never through convert/ (function-level
    imports included)."""
    graph = _module_graph()
    users = ("megatron_scale.training", "megatron_scale.evaluation", "megatron_scale.route_eval")
    assert all(any(m.startswith(u) for m in graph) for u in users)
    offenders = {m: sorted(d for d in deps if d.startswith("megatron_scale.convert"))
                 for m, deps in graph.items() if m.startswith(users)}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_checkpoint_wing_stands_on_the_model_below_the_methods() -> None:
    """checkpoint/ (records, save and load, the reader, the digest, the saved layout) imports the
    model and never the methods, nor what stands on them (function-level imports included)."""
    graph = _module_graph()
    forbidden = ("megatron_scale.methods", "megatron_scale.training", "megatron_scale.train", "megatron_scale.convert",
                 "megatron_scale.evaluation", "megatron_scale.route_eval", "megatron_scale.bio", "megatron_scale.recipe",
                 "megatron_scale.launch")
    wing = {m: deps for m, deps in graph.items() if m.startswith("megatron_scale.checkpoint")}
    assert len(wing) >= 6 and any(d.startswith("megatron_scale.model") for deps in wing.values() for d in deps)
    offenders = {m: sorted(d for d in deps if d.startswith(forbidden)) for m, deps in wing.items()}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_only_the_checkpoint_wing_reads_or_writes_common_state() -> None:
    """A checkpoint's common state (checkpoint/records.py: model_args, scale, train_state, layout)
    is written by save_checkpoint from its typed arguments and read by read_records, both in
    checkpoint/: no other module of the package or the tools calls megatron-core's
    dist_checkpointing or torch.distributed.checkpoint, imports records.py's names for the
    entries, or indexes a record by them. (The gateway, _mcore.py, only re-exports; the kill
    harness, testing/kills.py, is test machinery that compares two checkpoints' files byte for
    byte.)"""
    from megatron_scale.checkpoint import records

    wing, exempt = PKG / "checkpoint", {"_mcore.py", "testing/kills.py"}
    names = {"MODEL_ARGS", "SCALE", "TRAIN_STATE", "LAYOUT", "COMMON_ENTRIES"}
    keys = set(records.COMMON_ENTRIES) - {"scale", "layout"}  # words too common to look for as strings
    assert {records.MODEL_ARGS, records.TRAIN_STATE} <= keys
    offenders: dict[str, list[str]] = {}
    files = [p for p in _sources() if wing not in p.parents] + sorted((PKG.parent / "tools").glob("*.py"))
    for p in files:
        rel = str(p.relative_to(PKG)) if PKG in p.parents else str(p.relative_to(PKG.parent))
        if rel in exempt:
            continue
        found = [n for n in _imports(p) if n.startswith("torch.distributed.checkpoint")]
        found += [n for n in _imports(p) if n.startswith("megatron_scale.checkpoint.records.")
                  and n.rsplit(".", 1)[1] in names]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "dist_checkpointing":
                found.append(f"dist_checkpointing:{node.lineno}")
            if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and node.slice.value in keys):
                found.append(f"[{node.slice.value!r}]:{node.lineno}")
        if found:
            offenders[rel] = found
    assert offenders == {}
    assert any("dist_checkpointing" in p.read_text() for p in wing.glob("*.py"))


def _room(module: str) -> str:
    """A module's room: the package folder (or top-level module) it sits in, megatron_scale.<room>...."""
    return module.split(".")[1] if "." in module else module


def _room_arrows(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import (an arrow wherever one module imports another's)."""
    arrows: dict[str, set[str]] = {}
    for m, deps in graph.items():
        arrows.setdefault(_room(m), set()).update(_room(d) for d in deps if _room(d) != _room(m))
    return arrows


def _room_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of the room graph (an arrow wherever a module of one room imports one of another),
    as the rooms of each strongly connected component of more than one room."""
    arrows = _room_arrows(graph)
    reach = {r: _reached(arrows, r) for r in arrows}
    return sorted({tuple(sorted(c for c in reach[r] if r in reach.get(c, ()))) for r in arrows if r in reach[r]})


def test_no_cycle_between_rooms() -> None:
    """The folders stand on one another in floors: no room imports, through any chain of modules (a
    function-level import counted), a room that imports it. Module-level cycles are caught above; a
    room-level one (bio -> evaluation -> reports -> bio, once: evaluation/splice.py read run records
    through the reports) is what lifts a floor without any module cycle."""
    graph = _module_graph()
    assert _room_cycles(graph) == []
    # the rule has teeth: the arrow the run records once made is caught
    probe = {**graph, "megatron_scale.evaluation.splice": graph["megatron_scale.evaluation.splice"]
             | {"megatron_scale.reports.recipe"}}
    assert ["bio", "evaluation", "reports"] in [list(c) for c in _room_cycles(probe)]


def _floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor: 1 for a room that imports no other, else one above the highest it imports."""
    arrows = _room_arrows(graph)
    floors: dict[str, int] = {}

    def floor(r: str) -> int:
        if r not in floors:
            floors[r] = 1 + max((floor(t) for t in arrows.get(r, ())), default=0)
        return floors[r]

    for r in arrows:
        floor(r)
    return floors


def test_the_package_stands_on_at_most_eleven_floors() -> None:
    """The house of code-review-5.md §5 (tools/ on top, one floor above the package) keeps to 12
    floors: the package's rooms on at most 11. A new arrow that lifts a room over another floor
    (as route_eval/stored.py -> training once did) fails here, and the room that rose is named."""
    graph = _module_graph()
    assert _room_cycles(graph) == []
    floors = _floors(graph)
    assert len(floors) > 25 and floors["flags"] == 1
    assert max(floors.values()) <= 11, sorted(floors.items(), key=lambda kv: -kv[1])[:4]
    probe = {**graph, "megatron_scale.route_eval.curves": graph["megatron_scale.route_eval.curves"]
             | {"megatron_scale.training.loop"}}
    assert max(_floors(probe).values()) > 11  # the arrow of ea8ecd5 would add a floor


def test_evaluation_does_not_import_training() -> None:
    """Checkpoints are evaluated through the model and its records (model/, checkpoint/, methods/),
    never the training loop's code: a run's evaluation must not depend on how it was trained."""
    graph = _module_graph()
    offenders = {m: sorted(d for d in deps if d.startswith(("megatron_scale.training", "megatron_scale.train")))
                 for m, deps in graph.items() if m.startswith("megatron_scale.evaluation")}
    assert any(m.startswith("megatron_scale.evaluation") for m in graph)
    assert {m: d for m, d in offenders.items() if d} == {}


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every package module `start` imports, directly or through others (function-level imports
    included)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


MODEL_RUNNERS = ("megatron_scale.methods", "megatron_scale.launch", "megatron_scale.training", "megatron_scale.train",
                 "megatron_scale.evaluation", "megatron_scale.checkpoint", "megatron_scale.convert")
"""What opens, trains or runs a model: the methods, the launcher, training, the runners beside
evaluation, the checkpoint wing, conversion."""


def test_the_analysis_and_the_reports_run_no_model() -> None:
    """route_eval/ analyses stored records and reports/ reads finished runs' files: neither
    reaches (directly or through any module it imports) the methods, the launcher, training, the
    model runners (evaluation/: the route sweep, the route records), the checkpoint wing or
    conversion. A room that needs a model pass stands beside evaluation instead, so that an
    analysis never lifts the house by a floor (as route_eval/stored.py -> training.data once did)."""
    graph = _module_graph()
    rooms = ("megatron_scale.route_eval", "megatron_scale.reports")
    checked = [m for m in graph if m.startswith(rooms)]
    assert {m.split(".")[1] for m in checked} == {"route_eval", "reports"} and len(checked) > 15
    offenders = {m: sorted(d for d in _reached(graph, m) if d.startswith(MODEL_RUNNERS)) for m in checked}
    assert {m: d for m, d in offenders.items() if d} == {}
    # the rule has teeth: the arrow that once lifted route_eval over training is caught
    probe = {**graph, "megatron_scale.route_eval.stored": {"megatron_scale.data.batches", "megatron_scale.training.loop"}}
    assert "megatron_scale.training.loop" in _reached(probe, "megatron_scale.reports.route_frontier")


def test_only_the_training_entry_and_bio_import_training() -> None:
    """training/ (the plan, the loop, its config) is imported by the entry (train.py) and the
    biography benchmark (bio/, which runs the loop in-process) alone; the data pipeline it reads
    lives in data/ (data/batches.py), where evaluation and the route records read it too."""
    graph = _module_graph()
    users = sorted(m for m, deps in graph.items() if not m.startswith("megatron_scale.training")
                   and any(d.startswith("megatron_scale.training") for d in deps))
    assert "megatron_scale.train" in users
    assert [m for m in users if m != "megatron_scale.train" and not m.startswith("megatron_scale.bio.")] == []


def test_results_import_nothing_of_the_package() -> None:
    """A results folder's scripts record what was run: they call the tools' command lines (or
    the tools became tested tools), so the package can change under them without an untested
    caller (review 5, section 1). The last three (gate_control.py, cells.py, bits_by_target.py)
    became shell scripts calling tools/bio_routed_control.py, tools/frontier_cells.py and
    tools/bits_by_target.py (issue 63)."""
    results = PKG.parent / "results"
    scripts = sorted(results.rglob("*.py"))
    importers = {str(p.relative_to(results)) for p in scripts
                 if any(n == "megatron_scale" or n.startswith("megatron_scale.") for n in _imports(p))}
    assert results.is_dir() and importers == set()


def test_nothing_edits_sys_path() -> None:
    """The tools run on the installed package (README: pip install -e .; tests/run.sh's venv), so
    neither they nor the package edit sys.path at import (house rule 8)."""
    tools = sorted((PKG.parent / "tools").glob("*.py"))
    editors = sorted(
        str(p.relative_to(PKG.parent)) for p in _sources() + tools
        if any(isinstance(n, ast.Attribute) and n.attr in ("insert", "append", "extend")
               and isinstance(n.value, ast.Attribute) and n.value.attr == "path"
               and getattr(n.value.value, "id", None) == "sys" for n in ast.walk(ast.parse(p.read_text())))
    )
    assert len(tools) > 10 and editors == []


def test_every_transformer_config_comes_from_the_architecture_record() -> None:
    """model/args.py LlamaArgs.transformer_config is the one place a TransformerConfig is made
    (the package and the tools; tests build their own tiny ones)."""
    tools = sorted((PKG.parent / "tools").glob("*.py"))
    makers = sorted(
        str(p.relative_to(PKG.parent)) for p in _sources() + tools
        if any(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "TransformerConfig"
               for n in ast.walk(ast.parse(p.read_text())))
    )
    assert makers == ["megatron_scale/model/args.py"]

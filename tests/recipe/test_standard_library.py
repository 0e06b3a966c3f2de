"""The recipe's house rule, checked on the source: the recipe (recipe/) and the reports' tables
import the standard library, each other and the package's standard-library floor (flags,
durable, artifacts, method_catalog) only, so the launcher runs on the batch host without site-packages
(`python -S`), outside the container image. The package-wide rules: tests/test_layering.py."""

from __future__ import annotations

import subprocess
import sys

from tests.test_layering import PKG, _imports

STDLIB_FLOOR = ("megatron_scale.flags", "megatron_scale.durable", "megatron_scale.artifacts", "megatron_scale.method_catalog",
                "megatron_scale.run_metrics")
"""The package's standard-library floor: modules that import nothing outside the standard library,
so that the recipe's launcher (run without site-packages) and the reports may use them."""


def test_the_stdlib_floor_imports_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names)
    got = {name: sorted(n for n in _imports(PKG / f"{name.split('.', 1)[1]}.py") if n.split(".")[0] not in allowed)
           for name in STDLIB_FLOOR}
    assert {k: v for k, v in got.items() if v} == {}


def test_the_recipe_launcher_and_report_read_files_with_the_standard_library() -> None:
    """recipe/ runs on the batch host outside the container (settings.py says why), and the
    report's tables read the JSON the evaluation steps wrote: standard library, the recipe's and
    the reports' own modules and the package's standard-library floor only (the report's plot:
    matplotlib)."""
    allowed = set(sys.stdlib_module_names) | {"megatron_scale"}
    recipe = sorted(f"recipe/{p.stem}" for p in (PKG / "recipe").glob("*.py"))
    assert "recipe/steps" in recipe and "recipe/launch" in recipe
    got = {}
    for name, extra in ((*((r, ()) for r in recipe), ("reports/benchmarks", ()), ("reports/route_sweep", ()),
                         ("reports/recipe", ("matplotlib",)))):
        bad = sorted(n for n in _imports(PKG / f"{name}.py")
                     if n.split(".")[0] not in allowed | set(extra)
                     or (n.startswith("megatron_scale.")
                         and not n.startswith(("megatron_scale.recipe", "megatron_scale.reports", *STDLIB_FLOOR))))
        got[name] = bad
    assert {k: v for k, v in got.items() if v} == {}


def test_the_recipe_launcher_side_needs_only_the_standard_library() -> None:
    """examples/scale_korean.sh runs `python3 -m megatron_scale.recipe run` (settings, steps, locks,
    the launches, the ARRAY=1 submission) on the batch host, outside the container image: without
    site-packages (`python -S`), the launcher's side and the floor it stands on must import."""
    code = ("import megatron_scale.recipe.__main__, megatron_scale.recipe.launch, megatron_scale.recipe.lock, "
            "megatron_scale.recipe.array, " + ", ".join(STDLIB_FLOOR))
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=PKG.parent, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"}, check=False)
    assert r.returncode == 0, r.stderr

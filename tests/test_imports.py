"""Every module imports alone, and imports flow one way: down the pipeline of subpackages (docs/design.md).

The package's folders are its layers, in pipeline order (ORDER): a module may import from its own subpackage and
from those before it, never from a later one. Nothing below report/ prints or imports a terminal library, except
the probe's standalone script (a program copied out and run on the rented machine). The validator stands beside
the solver and never uses it. There are no import cycles.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "optimizer"
ORDER = ['inputs', 'models', 'launch', 'solve', 'portfolio', 'measure', 'report', 'cli']
TOP = {"__main__"}  # modules at the top of the package: they may import anything
PROGRAMS = {"optimizer.measure.probe_script"}  # standalone scripts (stdlib only), allowed to print
TERMINAL = {"click", "rich"}  # user-interface libraries: report/ and cli/ only
# escapes file data for rich's markup (rich.markup.escape) so that any stage can name a file in an error; prints nothing
MARKUP_ESCAPE = {"optimizer.inputs.terminal"}
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"
)
FILE = {m: ROOT / (m.replace(".", "/") + ".py") for m in MODULES}


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 2:
        return len(ORDER) if parts[1] in TOP else -1
    return ORDER.index(parts[1]) if parts[1] in ORDER else -1


def _imports(module: str) -> set[str]:
    """What ``module`` imports inside the package: modules, or a subpackage itself (``from optimizer.launch import
    launch_settings`` counts as optimizer.launch); ``from optimizer.pkg import mod`` counts as optimizer.pkg.mod."""
    tree = ast.parse(FILE[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optimizer"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                found.add(dotted if dotted in FILE else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("optimizer")}
    return {m for m in found if m.startswith("optimizer.")}


def _third_party(module: str) -> set[str]:
    tree = ast.parse(FILE[module].read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return {n.split(".")[0] for n in names}


def test_every_module_sits_in_a_subpackage_of_the_pipeline():
    assert [m for m in MODULES if _layer(m) < 0] == []


# Run in one child interpreter: before each module, every ``optimizer`` module is dropped from sys.modules, so the
# module imports the package from nothing (third-party libraries stay loaded: that is what keeps it fast). Prints one
# JSON object, module -> "" or the traceback of its import.
_ALONE = """
import importlib, json, sys, traceback
out = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "optimizer" or m.startswith("optimizer.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
        out[name] = ""
    except BaseException:
        out[name] = traceback.format_exc()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def imported_alone() -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", _ALONE, *MODULES], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone(module, imported_alone):
    assert imported_alone[module] == ""


def test_a_module_that_fails_to_import_is_reported():
    """The child script itself: a module that raises on import is reported with its traceback, not skipped."""
    done = subprocess.run([sys.executable, "-c", _ALONE, "optimizer.no_such_module", "json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)  # fmt: skip
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ModuleNotFoundError" in out["optimizer.no_such_module"] and out["json"] == ""


@pytest.mark.parametrize("module", MODULES)
def test_imports_flow_down_the_pipeline(module):
    later = sorted(dep for dep in _imports(module) if _layer(dep) > _layer(module))
    assert later == [], f"{module} imports from later subpackages: {later}"


def test_there_are_no_import_cycles():
    graph = {m: {d for d in _imports(m) if d in FILE} for m in MODULES}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append([*path[path.index(d):], d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [m])
    assert cycles == []


@pytest.mark.parametrize("module", [m for m in MODULES if _layer(m) < ORDER.index("report") and m not in PROGRAMS])
def test_nothing_below_report_uses_the_terminal(module):
    tree = ast.parse(FILE[module].read_text(encoding="utf-8"))
    prints = [n.lineno for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"]  # fmt: skip
    ui = sorted(_third_party(module) & TERMINAL)
    if module in MARKUP_ESCAPE:
        ui = [u for u in ui if u != "rich"]
    assert (ui, prints) == ([], [])


def test_the_validator_does_not_use_the_solver():
    solving = {"optimizer.solve.solver", "optimizer.solve.planner", "optimizer.solve.pareto", "optimizer.solve.batch"}
    assert _imports("optimizer.solve.validator") & solving == set()

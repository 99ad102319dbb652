"""Every module imports alone, and imports flow one way (docs/design.md section 3).

schema <- catalog/activations <- memory/timing/cost <- space <- solver <- (explain <-) planner/pareto/batch <- report
<- cli. The validator stands beside the solver: it may use the models and space's hardware rows, never the solver or
planner.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "optimizer"
# leaf name -> file; leaf names are unique across the package and its subpackages (models/, ...)
FILES = {p.stem: p for p in PACKAGE.rglob("*.py") if p.stem != "__init__"}
MODULES = sorted(FILES)
DOTTED = {m: ".".join(FILES[m].relative_to(PACKAGE.parent).with_suffix("").parts) for m in MODULES}

LAYER = {  # a module may import only modules of a lower layer (or, listed in SAME_LAYER, of its own)
    "errors": 0, "schema": 0, "schema_catalog": 0, "schema_plan": 0, "schema_portfolio": 0, "atomic": 0,
    "inputfile": 0,
    "attention": 1, "context": 1, "coverage": 1,
    "yamlio": 1, "configs": 1,
    "launch_common": 1, "ds_config": 1, "fsdp_args": 1, "hf_args": 2, "torchtune_cfg": 3, "nemo_cfg": 2,
    "llamafactory_cfg": 3, "axolotl_cfg": 3, "exporters": 4, "by_engine": 5,
    "catalog": 2, "engines": 3, "activations": 2, "pipeline": 2, "measure": 2, "overlay": 2,
    "importers": 3,
    "memory": 3, "timing": 3, "cost": 3, "comm": 3, "overheads": 3, "interruptions": 3, "import_skypilot": 3,
    "space": 4, "uncertainty": 4, "hosts": 4,
    "limits": 5, "solver": 5, "validator": 5, "portfolio_problem": 5, "portfolio": 6,
    "explain_relax": 6, "explain": 6, "requirements": 6, "checklist": 6, "offer_facts": 6,
    "planner": 7,
    "pareto": 8, "batch": 8, "calibrate": 8, "probe": 8, "portfolio_plan": 8,
    "report": 9, "report_front": 9, "report_batch": 9, "report_catalog": 9, "report_measure": 9,
    "report_portfolio": 9, "report_reference": 9, "report_offer": 9, "cli_import": 9, "terminal": 9,
    "probe_script": 9,  # the standalone script ftopt probe copies out (stdlib only): a program, so it prints
    "cli": 10, "cli_measure": 10, "cli_portfolio": 10, "__main__": 11,
    # report_html/: the --html pages, beside the other report modules
    "html_shell": 9, "html_svg": 9, "html_plan": 9, "html_front": 9, "html_portfolio": 9, "html_batch": 9,
}  # fmt: skip
SAME_LAYER = {
    ("schema_catalog", "schema"), ("schema_plan", "schema"), ("schema_portfolio", "schema"), ("timing", "memory"),
    ("batch", "pareto"), ("report_front", "report"), ("report_portfolio", "report"), ("probe", "calibrate"),
    ("report", "report_measure"), ("cli", "cli_measure"), ("cli", "cli_portfolio"), ("timing", "comm"),
    ("activations", "pipeline"), ("comm", "memory"), ("explain", "explain_relax"), ("overheads", "memory"),
    ("space", "hosts"), ("solver", "limits"), ("atomic", "errors"), ("inputfile", "errors"),
    ("report_portfolio", "report_front"), ("space", "uncertainty"),
    ("report", "report_offer"),
    ("html_svg", "html_shell"), ("html_plan", "html_shell"), ("html_plan", "html_svg"), ("html_plan", "report"),
    ("html_front", "html_shell"), ("html_front", "html_svg"), ("html_front", "html_plan"),
    ("html_front", "report_front"), ("html_portfolio", "html_shell"), ("html_portfolio", "html_svg"),
    ("html_batch", "html_shell"),
    *((m, "terminal") for m in ("report", "report_batch", "report_catalog", "report_front", "report_portfolio",
                                "report_measure")),
}  # fmt: skip
TERMINAL = {"click", "rich"}  # user-interface libraries: report modules and cli only


def _imports(module: str) -> set[str]:
    tree = ast.parse(FILES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("optimizer") and (PACKAGE.parent / node.module.replace(".", "/")).is_dir():
                found |= {f"{node.module}.{a.name}" for a in node.names}  # from optimizer[.models] import memory
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _internal(module: str) -> set[str]:
    return {m.split(".")[-1] for m in _imports(module) if m.startswith("optimizer.") and m.split(".")[-1] in FILES}


def test_every_module_has_a_layer():
    assert sorted(set(MODULES) - set(LAYER)) == []


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_in_a_fresh_interpreter(module):
    done = subprocess.run([sys.executable, "-c", f"import {DOTTED[module]}"], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", MODULES)
def test_imports_flow_one_way(module):
    against = sorted(
        dep for dep in _internal(module)
        if LAYER[dep] > LAYER[module] or (LAYER[dep] == LAYER[module] and (module, dep) not in SAME_LAYER)
    )  # fmt: skip
    assert against == [], f"optimizer.{module} (layer {LAYER[module]}) imports {against}"


@pytest.mark.parametrize("module", [m for m in MODULES if LAYER.get(m, 99) < LAYER["report"]])
def test_nothing_below_report_uses_the_terminal(module):
    tree = ast.parse(FILES[module].read_text(encoding="utf-8"))
    ui = sorted(m for m in _imports(module) if m.split(".")[0] in TERMINAL)
    prints = [n.lineno for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"]  # fmt: skip
    assert (ui, prints) == ([], [])


def test_the_validator_does_not_use_the_solver():
    assert _internal("validator") & {"solver", "planner", "pareto", "batch"} == set()

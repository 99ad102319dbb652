"""docs/json-contract.md against the documents the code writes: the same keys, in the same order, nothing left out."""

from __future__ import annotations

import json
import re

import yaml

from optimizer.inputs.schema import PlanPins, Term
from optimizer.inputs.schema_plan import Estimate, Plan
from optimizer.report.reference import PAGE

from .conftest import REPO

CONTRACT = REPO / "docs" / "json-contract.md"
# appended after the estimate's keys by solve_json
SOLVE_ONLY = ("trade_off", "hint", "bound", "cut_short", "next_best")


def _rows() -> dict[str, str]:
    """Key -> meaning of the table 'A plan or an estimate', in the table's order."""
    text = CONTRACT.read_text(encoding="utf-8")
    table = text[text.index("## A plan or an estimate") : text.index("## An infeasible solve")]
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", table, flags=re.MULTILINE)
    return dict(rows)


def _in_order(keys: list[str], documented: list[str]) -> bool:
    """Whether ``keys`` appear in ``documented`` and in the same relative order."""
    positions = [documented.index(k) for k in keys]
    return positions == sorted(positions)


def test_the_table_lists_every_top_level_key_in_the_order_the_code_writes_it():
    documented = list(_rows())
    keys = list(Estimate.model_fields)  # a pydantic model serialises its fields in declaration order
    assert [k for k in documented if k in keys] == keys
    assert documented[-len(SOLVE_ONLY) :] == list(SOLVE_ONLY)  # solve_json appends these after the estimate's keys


def test_a_real_solve_document_follows_the_documented_order(run_cli):
    doc = json.loads(run_cli("solve", REPO / "scenarios" / "7b-qlora.yaml", "--json").stdout)
    documented = list(_rows())
    assert set(doc) <= set(documented), set(doc) - set(documented)
    assert _in_order(list(doc), documented), list(doc)


def test_the_plan_row_names_every_plan_key_in_order():
    row = _rows()["plan"]
    named = re.findall(r"`(\w+)` \(|`(\w+)`,", row)
    first = [a or b for a, b in named]
    keys = list(Plan.model_fields)
    assert all(f"`{k}`" in row for k in keys), [k for k in keys if f"`{k}`" not in row]
    assert _in_order(keys, [k for k in first if k in keys]), first


def test_requirements_and_checklist_say_what_they_hold():
    rows = _rows()
    assert "confirm" in rows["requirements"] and "host RAM" in rows["requirements"]
    for key in ("check", "command", "expected", "unit", "stop_if"):
        assert f"`{key}`" in rows["checklist"]


def test_a_plan_without_hybrid_sharding_leaves_shard_group_out_and_estimate_reads_it_back(run_cli, tmp_path):
    scenario = REPO / "scenarios" / "7b-qlora.yaml"
    planned = json.loads(run_cli("solve", scenario, "--json").stdout)
    assert planned["status"] == "optimal" and "shard_group" not in planned["plan"]  # documented: left out
    doc = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    doc["plan"] = planned["plan"]
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump(doc), encoding="utf-8")
    est = run_cli("estimate", pinned, "--json")
    assert est.exit_code == 0, est.stderr
    assert json.loads(est.stdout)["plan"] == planned["plan"]
    hybrid = Plan.model_validate({**planned["plan"], "shard_group": 8}).model_dump(mode="json")
    assert hybrid["shard_group"] == 8  # a hybrid plan keeps it


def test_the_scenario_reference_says_which_plan_terms_are_read_back():
    """solve --json writes term second or minute (an hourly price billed in those increments); estimate reads them
    back as hour, and the scenario reference must say so."""
    row = next(line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("| `plan.term` |"))
    for value in ("second", "minute"):
        assert PlanPins.model_validate({"term": value}).term is Term.hour
        assert value in row.split("|")[5], row


def test_the_exit_status_section_lists_every_code_the_help_lists(run_cli):
    # the section had 0, 1, 2 and 130; --help lists 3 (an output not written) and 143 (batch ended by SIGTERM) too
    text = CONTRACT.read_text(encoding="utf-8")
    section = " ".join(text[text.index("## Exit status") :].split("\n## ")[0].split())
    table = run_cli("--help").stdout.split("Exit status:")[1]
    codes = re.findall(r"^ {2,4}(\d+) {2,}", table, flags=re.MULTILINE)
    assert codes == ["0", "1", "2", "3", "130", "143"]
    assert [c for c in codes if not re.search(rf"[;:] {c} ", section)] == []


def test_the_status_row_says_an_estimate_that_does_not_fit_keeps_its_figures(run_cli):
    # the row said infeasible has plan, memory, time and cost null; estimate evaluates the configuration it is given
    doc = json.loads(run_cli("estimate", REPO / "scenarios/7b-lora.yaml", "--gpu", "RTX-4090", "--cards", "1",
                             "--micro-batch", "2", "--checkpointing", "full", "--json").stdout)  # fmt: skip
    assert doc["status"] == "infeasible" and doc["memory"]["fits"] is False
    assert all(doc[k] is not None for k in ("plan", "memory", "time", "cost"))
    solve_part, estimate_part = _rows()["status"].split("For `estimate`")
    assert "`solve`: no plan; `plan`, `memory`, `time`, `cost` are `null`" in solve_part
    assert "`plan`, `memory`, `time`, `cost` and the blocks marked" in estimate_part

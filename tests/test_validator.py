"""The plan validator: every solver result passes it, each rule catches its own violation, plans round-trip."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from optimizer.inputs.schema import Budget, Offload, OptimizerName, Precision, Scenario
from optimizer.inputs.schema_plan import Estimate
from optimizer.solve.planner import SolveResult, estimate_scenario, prepare, solve_scenario
from optimizer.solve.validator import check_plan

from .conftest import REPO, seventy_b

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


@functools.cache
def solved(path: Path) -> SolveResult:
    return solve_scenario(path, top_k=2)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_plan_passes_the_validator(path: Path):
    sc, catalog, _ = prepare(path)
    result = solved(path)
    for est in [result.best, *result.top, *result.alternatives]:
        assert check_plan(sc, catalog, est) == [], est.plan


def test_an_infeasible_result_has_nothing_to_violate(catalog):
    sc, _, _ = prepare(SCENARIOS[0])
    empty = Estimate(status="infeasible", plan=None, memory=None, time=None, cost=None)
    assert check_plan(sc, catalog, empty) == []


# ------------------------------------------------------------------------------------------------ each rule


@functools.cache
def _valid() -> tuple[Scenario, Any, Estimate]:
    path = seventy_b()  # multi-card, ZeRO, offload: every rule has something to check (its nodes' RAM stated)
    sc, catalog, _ = prepare(path)
    return sc, catalog, solved(path).best


def _tampered(part: str, **changes: Any) -> Estimate:
    _, _, est = _valid()
    return est.model_copy(update={part: getattr(est, part).model_copy(update=changes)})


def _violations(est: Estimate, **scenario_changes: Any) -> list[str]:
    sc, catalog, _ = _valid()
    return check_plan(sc.model_copy(update=scenario_changes), catalog, est)


def test_the_untouched_plan_is_valid():
    assert _violations(_valid()[2]) == []


@pytest.mark.parametrize(
    ("part", "changes", "pattern"),
    [
        ("plan", {"tp": 3}, r"tp=3 must divide heads"),
        ("plan", {"tp": 16}, r"tp=16 exceeds the NVLink domain"),
        ("plan", {"cards": 7}, r"cards=7 != tp x pp x dp"),
        ("plan", {"grad_accum": 1}, r"micro_batch x grad_accum x dp = \d+ != global_batch"),
        ("plan", {"nodes": 99}, r"nodes=99 but"),
        ("plan", {"zero_stage": 0, "offload": Offload.all}, r"offload=all is not available at ZeRO stage 0"),
        ("plan", {"optimizer": OptimizerName.sgd}, r"optimizer=sgd but the scenario trains with adamw"),
        ("plan", {"offer": "no-such-offer"}, r"offer no-such-offer is not in the catalog"),
        ("plan", {"billed_units": {"hour": 1}}, r"cover 1 h, less than the job's"),
        ("memory", {"weights": 1}, r"memory.weights = 1 but recomputed"),
        ("memory", {"total": 1}, r"memory.total = 1 but recomputed"),
        ("memory", {"fits": False}, r"memory.fits = False but recomputed True"),
        ("time", {"hours": 0.5}, r"time.hours = 0.5 but recomputed"),
        ("time", {"steps": 1}, r"time.steps = 1 but recomputed"),
        ("cost", {"total": 1.0}, r"cost 1.0 != billed units x prices x cards"),
        ("cost", {"currency": "EUR"}, r"cost currency EUR is not the offer's"),
    ],
)
def test_validator_reports_a_tampered_plan(part: str, changes: dict[str, Any], pattern: str):
    found = _violations(_tampered(part, **changes))
    assert any(re.search(pattern, v) for v in found), found


def test_validator_reports_a_plan_over_its_nodes_default_host_ram():
    # the 70B plan offloads ~1.6 TB per node: fine where the user states 2 TiB, not on the AutoDL node's default
    # RAM (hosts.host_ram_default: 29.8 GiB per card x the node's cards) when the scenario states nothing
    sc, _, est = _valid()
    found = _violations(est, allow=sc.allow.model_copy(update={"max_host_memory_gib": None}))
    ram = [v for v in found if v.startswith("host RAM: needs")]
    per_node = est.plan.cards // est.plan.nodes
    assert est.plan.offer == "seed002-a100-80g", est.plan
    assert ram and f"more than the default rule's {29.8 * per_node:.1f} GiB on seed002-a100-80g" in ram[0], found
    assert "memory.host_ram_fits = True but recomputed False" in found
    assert not any(v.startswith("memory.fits") for v in found), found  # the card is not what fails


def test_validator_reports_a_blown_budget():
    _, _, est = _valid()
    found = _violations(est, budget=Budget(amount=est.cost.total / 2, currency=est.cost.currency))
    assert any(re.search(r"exceeds the budget", v) for v in found), found


def test_validator_reports_a_missed_deadline():
    _, _, est = _valid()
    found = _violations(est, deadline_hours=est.time.hours / 2)
    assert any(re.search(r"over the deadline of", v) for v in found), found


def test_validator_reports_a_gpu_outside_the_allow_list():
    sc, _, est = _valid()
    found = _violations(est, allow=sc.allow.model_copy(update={"gpus": ["RTX-4090"], "max_cards": 1}))
    assert any(re.search(r"is not in allow.gpus", v) for v in found), found
    assert any(re.search(r"exceeds allow.max_cards 1", v) for v in found), found


def test_validator_reports_a_broken_pin():
    sc, _, est = _valid()
    found = _violations(est, plan=sc.plan.model_copy(update={"micro_batch": est.plan.micro_batch + 1}))
    assert any(re.search(r"plan pins micro_batch=\d+ but the plan has", v) for v in found), found


# ------------------------------------------------------------------------------------------------ round trip


def _round_trip(run_cli, tmp_path: Path, scenario: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    solve = run_cli("solve", scenario, "--json")
    planned = json.loads(solve.stdout)
    if planned["status"] == "infeasible":  # exit 1, nothing to feed back
        return planned, {}
    assert solve.exit_code == 0, solve.stderr
    doc = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    doc["plan"] = planned["plan"]
    pinned = tmp_path / scenario.name
    pinned.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    est = run_cli("estimate", pinned, "--json")
    assert est.exit_code == 0, est.stderr
    return planned, json.loads(est.stdout)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_a_solved_plan_fed_back_as_pins_reproduces_the_same_numbers(path: Path, run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # scenarios name their offer files relative to the repository
    planned, estimated = _round_trip(run_cli, tmp_path, path.relative_to(REPO))
    if planned["status"] == "infeasible":
        pytest.skip("no plan to feed back")  # 70b: no node of its catalog has the host RAM its plans need
    for key in ("plan", "memory", "time", "cost"):
        assert estimated[key] == planned[key], key


@pytest.mark.parametrize("path", SCENARIOS[::3], ids=[p.stem for p in SCENARIOS[::3]])
def test_an_estimate_of_a_pinned_plan_passes_the_validator(path: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["plan"] = solved(path).best.plan.model_dump(mode="json")
    pinned = tmp_path / path.name
    pinned.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    sc, catalog, _ = prepare(pinned)
    assert check_plan(sc, catalog, estimate_scenario(pinned, {})) == []


def test_a_layout_that_cannot_run_does_not_fit_and_says_why():
    # fp8 on an A100 (no fp8 peak): the time model gives no finite hours, so the plan does not fit (fits = False,
    # as the estimate reports) and the validator says the hours are not finite, without a fits disagreement
    est = _tampered("plan", precision=Precision.fp8)
    est = est.model_copy(update={"memory": est.memory.model_copy(update={"fits": False})})
    found = _violations(est)
    assert any("time.hours is not finite" in v for v in found), found
    assert not any(v.startswith("memory.fits") for v in found), found

"""Every command under --time-limit answers with its best plan so far (issue 25 item 5).

The candidate table's lexicographic best (solver.incumbent) seeds CP-SAT and is the answer when the limit ends
before CP-SAT has one. Checked against CP-SAT's proven optimum on the shipped scenarios.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from optimizer.inputs.catalog import resolve_model
from optimizer.inputs.schema import Objective, Status
from optimizer.models import memory
from optimizer.solve import space as space_module
from optimizer.solve.batch import solve_row
from optimizer.solve.planner import load_space, prepare, solve_scenario
from optimizer.solve.solver import SolverSettings, _Columns, incumbent, solve
from optimizer.solve.space import configurations, memory_rows
from optimizer.solve.validator import check_plan

from .conftest import REPO
from .scale_case import write_case

SCENARIOS = ["7b-lora.yaml", "70b.yaml", "14b-lora-tight-deadline.yaml", "7b-lora-tight-budget.yaml"]


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("objective", [Objective.cost, Objective.time])
def test_the_table_incumbent_is_the_proven_optimum(name, objective):
    loaded = load_space(REPO / "scenarios" / name)
    space, limits = loaded.space, loaded.limits
    proven = solve(space, objective, limits, SolverSettings(time_limit_s=60))
    levels = ["cost_cents", "time_s"] if objective is Objective.cost else ["time_s", "cost_cents"]
    best = incumbent(_Columns(space), np.ones(len(space.cand), dtype=bool), limits, levels)
    assert proven.status is Status.optimal and best == proven.index


@pytest.mark.parametrize("name", SCENARIOS[:2])
def test_a_limit_too_short_for_cp_sat_still_answers_with_the_best_plan(name):
    loaded = load_space(REPO / "scenarios" / name)
    proven = solve(loaded.space, Objective.cost, loaded.limits, SolverSettings(time_limit_s=60))
    rushed = solve(loaded.space, Objective.cost, loaded.limits, SolverSettings(time_limit_s=1e-6))
    assert rushed.status is Status.feasible and rushed.index == proven.index
    assert rushed.objective == proven.objective and rushed.bound <= rushed.objective


def test_solve_and_pareto_answer_at_a_millisecond(run_cli):
    solved = run_cli("solve", REPO / "scenarios/70b.yaml", "--time-limit", "0.001", "--json")
    assert solved.exit_code == 0, solved.stderr
    assert json.loads(solved.stdout)["status"] == "feasible"
    front = run_cli("pareto", REPO / "scenarios/70b.yaml", "--time-limit", "0.001", "--json")
    assert front.exit_code == 0, front.stderr
    assert len(json.loads(front.stdout)["points"]) >= 2


# ------------------------------------------------------------------------------------------------ a very large space


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """Llama-3.1-405B full fine-tuning over 300 multi-node offers, up to 4,096 cards (tests/scale_case.py)."""
    return write_case(tmp_path_factory.mktemp("scale"))


def test_a_limit_shorter_than_the_build_answers_with_a_real_plan_not_called_optimal(large):
    full = solve_scenario(large, settings=SolverSettings(time_limit_s=60))
    assert full.best.status is Status.optimal and full.searched is None
    assert full.enumerated > 300_000  # the whole space: 300 offers, 1,120 configurations each
    cut = solve_scenario(large, settings=SolverSettings(time_limit_s=1e-3))
    # the build stopped after its first chunk of offers: fewer configurations, and it says so
    assert cut.searched is not None and 0 < cut.searched[0] < cut.searched[1] == 300
    assert cut.enumerated < full.enumerated
    assert cut.best.status is Status.feasible and cut.bound is None  # CP-SAT's bound covers the offers seen only
    # a real plan: the validator re-checks it from scratch, and it is no cheaper than the optimum of every offer
    sc, catalog, _ = prepare(large)
    assert check_plan(sc, catalog, cut.best) == []
    assert cut.best.cost.total >= full.best.cost.total
    assert all(a.status is Status.feasible for a in cut.alternatives)


def test_the_cut_short_search_is_named_in_json_and_text(run_cli, large):
    answer = run_cli("solve", large, "--time-limit", "0.001", "--json")
    assert answer.exit_code == 0, answer.stderr
    doc = json.loads(answer.stdout)
    assert doc["status"] == "feasible" and doc["plan"] is not None and "bound" not in doc
    assert doc["cut_short"]["offers"] == 300 and 0 < doc["cut_short"]["offers_searched"] < 300
    text = run_cli("solve", large, "--time-limit", "0.001")
    assert text.exit_code == 0 and "cut the search short after" in text.stdout
    row = solve_row(str(large), SolverSettings(time_limit_s=1e-3))
    assert row["status"] == "feasible" and row["gpu"] is not None


@pytest.mark.parametrize("name", ["70b.yaml", "7b-lora.yaml", "14b-lora-tight-deadline.yaml"])
def test_a_build_in_chunks_of_offers_keeps_exactly_the_candidates_of_one_pass(monkeypatch, name):
    whole = load_space(REPO / "scenarios" / name).space
    monkeypatch.setattr(space_module, "BUILD_CHUNK_ROWS", 500)  # many chunks, each a few offers
    chunked = load_space(REPO / "scenarios" / name).space
    assert (chunked.enumerated, chunked.fitting, chunked.smallest_need, chunked.ram_short) == (
        whole.enumerated, whole.fitting, whole.smallest_need, whole.ram_short)
    for a, b in ((chunked.cand.offer_idx, whole.cand.offer_idx), (chunked.cand.cards, whole.cand.cards),
                 (chunked.cand.cfg.zero_stage, whole.cand.cfg.zero_stage), (chunked.cost_total, whole.cost_total),
                 (chunked.cand.time["hours"], whole.cand.time["hours"]),
                 (chunked.cand.mem["total"], whole.cand.mem["total"])):  # fmt: skip
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", ["70b.yaml", "7b-qlora.yaml", "8b-full-torchtune.yaml"])
def test_memory_once_per_distinct_configuration_equals_memory_on_every_row(name):
    sc, catalog, _ = prepare(REPO / "scenarios" / name)
    conf = configurations(sc, catalog, resolve_model(sc, catalog, REPO / "scenarios" / name), name)
    assert len(conf.cfg) > 1000
    once = memory_rows(conf.job, conf.cfg, catalog.calibration["memory"])
    every = memory.breakdown(conf.job, conf.cfg, catalog.calibration["memory"])
    assert once.keys() == every.keys() and all(np.array_equal(once[k], every[k]) for k in every)

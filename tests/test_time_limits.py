"""Every command under --time-limit answers with its best plan so far (issue 25 item 5).

The candidate table's lexicographic best (solver.incumbent) seeds CP-SAT and is the answer when the limit ends
before CP-SAT has one. Checked against CP-SAT's proven optimum on the shipped scenarios.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from optimizer.inputs.schema import Objective, Status
from optimizer.solve.planner import load_space
from optimizer.solve.solver import SolverSettings, _Columns, incumbent, solve

from .conftest import REPO

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

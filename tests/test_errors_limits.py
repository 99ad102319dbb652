"""Solver limits: a time limit gives the best plan found with status ``feasible`` and the proven bound, or a clear
one-line error; a candidate space over the cap is refused with a message rather than a hang or an out-of-memory.

On the scenarios used here CP-SAT proves optimality in milliseconds, and between "no solution yet" (UNKNOWN) and
OPTIMAL there is no time limit at which it stops with FEASIBLE. So the FEASIBLE path is tested by mapping the
status function directly and by a CP-SAT solver whose ``solve`` runs for real and then reports FEASIBLE, as a
solver stopped by its time limit would.
"""

from __future__ import annotations

import json

import pytest
from ortools.sat.python import cp_model

from optimizer.inputs.errors import SolverLimitError
from optimizer.inputs.schema import Status
from optimizer.solve import solver, space
from optimizer.solve.planner import solve_scenario


class _StoppedEarly(cp_model.CpSolver):
    """A real CP-SAT solver that reports an OPTIMAL result as FEASIBLE, with the bound it proved."""

    def solve(self, model, *args, **kwargs):  # noqa: D102
        code = super().solve(model, *args, **kwargs)
        return cp_model.FEASIBLE if code == cp_model.OPTIMAL else code


class _NoSolution(cp_model.CpSolver):
    """A solver stopped by its time limit before finding any plan (it solves, then reports none)."""

    def solve(self, model, *args, **kwargs):  # noqa: D102
        super().solve(model, *args, **kwargs)
        return cp_model.UNKNOWN


def _use(monkeypatch, cls) -> None:
    def _factory(settings, time_limit_s):
        s = cls()
        s.parameters.max_time_in_seconds = max(time_limit_s, 1e-6)
        s.parameters.num_workers = settings.workers
        s.parameters.random_seed = settings.seed
        return s

    monkeypatch.setattr(solver, "_solver", _factory)


@pytest.fixture
def small(write_scenario):
    return write_scenario(allow={"gpus": ["A100-80G"]})


# ------------------------------------------------------------------------------------------------ status mapping


@pytest.mark.parametrize(
    ("code", "status"),
    [(cp_model.OPTIMAL, Status.optimal), (cp_model.FEASIBLE, Status.feasible),
     (cp_model.INFEASIBLE, Status.infeasible), (cp_model.UNKNOWN, None)],  # fmt: skip
)
def test_cp_sat_status_maps_to_ours(code, status):
    assert solver.status_of(code) is status


def test_invalid_model_status_is_a_bug_not_a_user_error():
    with pytest.raises(RuntimeError, match="bug in solver._build"):
        solver.status_of(cp_model.MODEL_INVALID)


# ------------------------------------------------------------------------------------------------ time limit


def test_stopped_early_returns_the_plan_as_feasible_with_its_bound(monkeypatch, small):
    optimal = solve_scenario(small)
    _use(monkeypatch, _StoppedEarly)
    early = solve_scenario(small)
    assert early.best.status is Status.feasible
    assert early.best.plan == optimal.best.plan
    cost = optimal.best.cost  # the bound is in the report currency; the offer may be priced in another
    in_report_currency = cost.budget_currency_total if cost.budget_currency_total is not None else cost.total
    assert early.bound is not None and 0 < early.bound <= in_report_currency + 0.01


def test_stopped_early_json_says_feasible_and_gives_the_bound(monkeypatch, small, run_cli):
    _use(monkeypatch, _StoppedEarly)
    doc = json.loads(run_cli("solve", small, "--json").stdout)
    assert doc["status"] == "feasible"
    assert doc["bound"]["objective"] == "cost" and doc["bound"]["unit"] == "USD"
    assert doc["bound"]["value"] > 0


def test_time_limit_before_any_plan_answers_with_the_table_best(monkeypatch, small, run_cli):
    proven = json.loads(run_cli("solve", small, "--json").stdout)
    _use(monkeypatch, _NoSolution)
    result = run_cli("solve", small, "--time-limit", "0.5", "--json")
    assert result.exit_code == 0, result.stderr
    rushed = json.loads(result.stdout)
    assert proven["status"] == "optimal" and rushed["status"] == "feasible"
    assert rushed["plan"] == proven["plan"] and rushed["cost"] == proven["cost"]


def test_tiny_real_time_limit_never_crashes(small, run_cli):
    result = run_cli("solve", small, "--time-limit", "0.001", "--json")
    assert result.exit_code == 0, result.stderr  # the table's best plan when CP-SAT has none yet
    assert json.loads(result.stdout)["status"] in ("optimal", "feasible")


def test_time_limit_bounds_the_whole_lexicographic_solve(monkeypatch, small):
    limits_seen: list[float] = []
    original = solver._solver

    def _spy(settings, time_limit_s):
        limits_seen.append(time_limit_s)
        return original(settings, time_limit_s)

    monkeypatch.setattr(solver, "_solver", _spy)
    solve_scenario(small, settings=solver.SolverSettings(time_limit_s=2.0))
    assert limits_seen[0] <= 2.0 and limits_seen[1] < 2.0  # later levels get what the first one left


# ------------------------------------------------------------------------------------------------ candidate cap


def test_candidate_space_over_the_cap_is_refused(monkeypatch, small):
    monkeypatch.setattr(space, "MAX_CANDIDATES", 100)
    with pytest.raises(SolverLimitError, match=r"candidate space has [\d,]+ configurations \(limit 100\)"):
        solve_scenario(small)


def test_candidate_cap_through_the_cli_is_one_line_with_exit_2(monkeypatch, small, run_cli):
    monkeypatch.setattr(space, "MAX_CANDIDATES", 100)
    result = run_cli("solve", small)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"ftopt: error: {small}: ") and result.stderr.count("\n") == 1
    assert "narrow it with allow.gpus, allow.max_cards or plan pins" in result.stderr


def test_pinning_the_plan_brings_the_space_under_the_cap(monkeypatch, write_scenario):
    monkeypatch.setattr(space, "MAX_CANDIDATES", 100)
    # micro_batch 2: at 4 without checkpointing the 8B LoRA's peak x the default risk p90 ratio is over the card
    path = write_scenario(plan={"gpu": "A100-80G", "cards": 1, "micro_batch": 2, "checkpointing": "none"}, catalog="cn")
    result = solve_scenario(path)
    assert result.enumerated <= space.MAX_CANDIDATES and result.best.status is Status.optimal


@pytest.mark.parametrize("value", ["nan", "-nan"])
def test_nan_time_limit_is_a_one_line_error(value, small, run_cli):
    result = run_cli("solve", small, "--time-limit", value)
    assert result.exit_code == 2
    expected = "ftopt: error: command line: --time-limit: must be a finite number of seconds > 0, got nan\n"
    assert result.stderr == expected

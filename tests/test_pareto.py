"""Cost-versus-time fronts: exact against an exhaustive oracle, proven per point, consistent with solve."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optimizer.solve.pareto as pareto_mod
from optimizer.inputs.catalog import load_catalog, resolve_model
from optimizer.inputs.schema import Objective, Scenario, Status
from optimizer.solve.pareto import front, pareto_scenario, relevant
from optimizer.solve.planner import solve_scenario
from optimizer.solve.solver import Limits, cents, seconds, solve
from optimizer.solve.space import Space, build
from optimizer.solve.validator import ceil_cents, ceil_seconds, exact

from .conftest import REPO, scenario_doc, seventy_b

SMALL_MODELS = ["Llama-3.2-3B", "Llama-3.1-8B", "Qwen2.5-14B"]
GPU_CHOICES = ["RTX-4090", "L40S", "A100-80G", "H100-SXM", "H800", "RTX-A6000", "L20", "H20"]
PROVIDERS = ["runpod", "lambda", "aws", "hyperstack", "akash", "恒源云"]


def _space(catalog, **changes) -> Space:
    sc = Scenario.model_validate(scenario_doc(**changes))
    return build(sc, catalog, resolve_model(sc, catalog))


def _values(space: Space, fr) -> set[tuple[int, int]]:
    return {(p.cost_cents, p.time_s) for p in fr.points}


def _dominates(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and a != b


def oracle_front(space: Space, limits: Limits) -> set[tuple[int, int]]:
    """The (cost_cents, time_s) values of the non-dominated feasible plans, by plain loops.

    Independent of the code under test: money and time are rounded up with the validator's exact decimal
    ceilings (not solver.cents/seconds), and dominance is a pairwise loop (not pareto.nondominated).
    """
    c = space.cand
    feasible: list[tuple[int, int]] = []
    for i in range(len(c)):
        offer = space.offers[int(c.offer_idx[i])]
        cost_c, time_s = ceil_cents(exact(space.cost_total[i])), ceil_seconds(float(c.time["hours"][i]))
        if limits.gpus is not None and offer.gpu not in limits.gpus:
            continue
        if limits.providers is not None and offer.provider.lower() not in limits.providers:
            continue
        if limits.max_cards is not None and int(c.cards[i]) > limits.max_cards:
            continue
        if limits.max_nodes is not None and int(c.nodes[i]) > limits.max_nodes:
            continue
        if limits.budget_cents is not None and cost_c > limits.budget_cents:
            continue
        if limits.deadline_s is not None and time_s > limits.deadline_s:
            continue
        feasible.append((cost_c, time_s))
    return {p for p in feasible if not any(_dominates(q, p) for q in feasible)}


@st.composite
def instances(draw):
    """A small random scenario (model, method, data, allow-list) and random budget/deadline/card limits."""
    changes = {
        "model": draw(st.sampled_from(SMALL_MODELS)),
        "method": draw(st.sampled_from(["lora", "qlora", "full"])),
        "data": {"tokens": draw(st.sampled_from([2e6, 2e7, 2e8])), "epochs": 1},
        "seq_len": draw(st.sampled_from([1024, 2048, 4096])),
        "global_batch": draw(st.sampled_from([16, 32, 64])),
        "allow": {"gpus": draw(st.lists(st.sampled_from(GPU_CHOICES), min_size=1, max_size=4, unique=True))},
    }
    if changes["method"] == "full":
        changes["lora"] = None
    limits = {
        "budget_cents": draw(st.none() | st.integers(100, 2_000_000)),
        "deadline_s": draw(st.none() | st.integers(600, 400_000)),
        "max_cards": draw(st.none() | st.sampled_from([1, 2, 8, 16])),
        "providers": draw(st.none() | st.sets(st.sampled_from(PROVIDERS), min_size=1).map(frozenset)),
    }
    return changes, limits, draw(st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_front_equals_exhaustive_oracle_on_random_scenarios(instance):
    changes, lim, reduce = instance
    space = _space(load_catalog(), **{k: v for k, v in changes.items() if k != "allow"})
    limits = Limits(gpus=frozenset(changes["allow"]["gpus"]), **lim)
    fr = front(space, limits, Objective.cost, reduce=reduce)
    assert _values(space, fr) == oracle_front(space, limits)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_front_equals_oracle_when_costs_and_times_tie_often(data):
    # random integer costs and times on a real space: many exact ties and dominated plans
    base = _lora_space()
    n = 40  # the first 40 candidates: small enough for many examples, large enough for long fronts
    costs = np.array(data.draw(st.lists(st.integers(1, 12), min_size=n, max_size=n)), dtype=float)
    hours = np.array(data.draw(st.lists(st.integers(1, 12), min_size=n, max_size=n)), dtype=float)
    cand = base.cand.take(np.arange(n))
    cand.time["hours"] = hours
    space = dataclasses.replace(base, cand=cand, cost_total=costs, bills=base.bills[:n])
    limits = Limits(deadline_s=data.draw(st.none() | st.integers(3600, 12 * 3600)))
    fr = front(space, limits, Objective.cost, reduce=data.draw(st.booleans()))
    oracle = oracle_front(space, limits)
    assert _values(space, fr) == oracle
    assert len(fr.points) == len(oracle)  # one plan per (cost, time) value


@functools.cache
def _lora_space() -> Space:
    """The base 8B LoRA scenario over every built-in offer (about 170 candidates), built once."""
    return _space(load_catalog(), allow=None)


@pytest.fixture
def lora_space() -> Space:
    return _lora_space()


@pytest.fixture(scope="module")
def lora_front():
    return front(_lora_space(), Limits(), Objective.cost)


def test_no_plan_of_the_oracle_dominates_a_front_point(lora_space):
    space = lora_space
    limits = Limits(budget_cents=50_000, deadline_s=100 * 3600)
    fr = front(space, limits, Objective.cost, reduce=False)
    cost_c, time_s = cents(space.cost_total), seconds(space.cand.time["hours"])
    every = list(zip(cost_c.tolist(), time_s.tolist(), strict=True))
    feasible = [p for p in every if p[0] <= 50_000 and p[1] <= 100 * 3600]
    assert fr.points
    for p in fr.points:
        assert not any(_dominates(q, (p.cost_cents, p.time_s)) for q in feasible)


def test_front_points_get_cheaper_as_they_get_slower(lora_front):
    fr = lora_front
    costs = [p.cost_cents for p in fr.points]
    times = [p.time_s for p in fr.points]
    assert len(costs) > 2
    assert costs == sorted(costs) and times == sorted(times, reverse=True)
    assert len(set(costs)) == len(costs) and len(set(times)) == len(times)


def test_every_front_point_is_proven_optimal(lora_front):
    fr = lora_front
    assert {p.status for p in fr.points} == {Status.optimal}


def test_front_needs_one_solve_per_point_plus_the_last_infeasible_one_and_the_chosen(lora_front):
    fr = lora_front
    assert fr.solves == len(fr.points) + 2


def test_chosen_is_the_cheapest_point_for_objective_cost(lora_front):
    fr = lora_front
    assert fr.chosen == fr.points[0].index


def test_chosen_is_the_fastest_point_for_objective_time(lora_space):
    fr = front(lora_space, Limits(gpus=frozenset({"L40S", "RTX-4090", "A100-80G"})), Objective.time)
    assert len(fr.points) > 1
    assert fr.chosen == fr.points[-1].index


def test_front_is_empty_when_no_plan_meets_the_limits(lora_space):
    fr = front(lora_space, Limits(budget_cents=1), Objective.cost)
    assert fr.points == [] and fr.chosen is None


def test_relevant_subset_keeps_the_lexicographic_optimum(lora_space):
    space = lora_space
    for limits in (Limits(), Limits(budget_cents=2_000, deadline_s=20 * 3600), Limits(max_cards=2)):
        for objective in Objective:
            full = solve(space, objective, limits)
            reduced = solve(space, objective, limits, subset=relevant(space, limits))
            assert full.index == reduced.index


# ------------------------------------------------------------------------------------------------ scenario level


def test_pareto_scenario_chosen_plan_equals_solve():
    path = seventy_b()
    result = pareto_scenario(path)
    assert result.chosen is not None
    assert result.estimates[result.chosen].plan == solve_scenario(path).best.plan


def test_pareto_scenario_points_respect_budget_and_deadline():
    result = pareto_scenario(REPO / "scenarios" / "7b-lora.yaml")
    assert result.estimates
    assert all(c <= result.budget for c in result.costs)
    assert all(h <= result.deadline_hours for h in result.hours)


def test_pareto_of_an_infeasible_scenario_carries_the_explanation(write_scenario):
    path = write_scenario(budget={"amount": 0.01, "currency": "USD"})
    result = pareto_scenario(path)
    assert result.estimates == []
    assert result.relaxation is not None and "budget" in result.relaxation.message


# ------------------------------------------------------------------------------------------------ CLI


def test_pareto_json_lists_points_with_plan_cost_and_hours(run_cli):
    res = run_cli("pareto", seventy_b(), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "optimal" and doc["currency"] == "CNY"
    assert sum(p["chosen"] for p in doc["points"]) == 1
    assert {"front", "status", "plan", "memory", "time", "cost"} <= set(doc["points"][0])
    for p in doc["points"]:  # the front position in the report currency; the plan's own bill keeps its currency
        assert set(p["front"]) == {"cost", "hours"} and isinstance(p["front"]["cost"], float)
        assert set(p["cost"]) >= {"total", "currency"}


def test_one_solve_is_counted_in_the_singular_in_text_and_html(run_cli, write_scenario, tmp_path: Path):
    # an infeasible front takes one CP-SAT solve, which the header and the HTML subtitle called "1 CP-SAT solves"
    path = write_scenario(catalog="us", budget={"amount": 0.01, "currency": "USD"})
    res = run_cli("pareto", path, "--html", tmp_path / "front.html")
    assert res.exit_code == 1
    page = (tmp_path / "front.html").read_text(encoding="utf-8")
    for text in (" ".join(res.stdout.split()), page):
        assert "1 CP-SAT solve" in text and "1 CP-SAT solves" not in text


def test_pareto_csv_has_a_header_and_one_row_per_point(run_cli, tmp_path: Path):
    out = tmp_path / "front.csv"
    res = run_cli("pareto", seventy_b(), "--csv", out, "--json")
    lines = out.read_text().splitlines()
    assert lines[0].startswith("point,chosen,status,gpu")
    assert len(lines) - 1 == len(json.loads(res.stdout)["points"])


@pytest.mark.parametrize("suffix,magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_pareto_plot_writes_the_image(run_cli, tmp_path: Path, suffix: str, magic: bytes):
    out = tmp_path / f"front.{suffix}"
    res = run_cli("pareto", seventy_b(), "--plot", out)
    assert res.exit_code == 0, res.output
    assert out.read_bytes().startswith(magic)


def test_pareto_plot_draws_each_points_uncertainty_band(run_cli, tmp_path: Path):
    out = tmp_path / "front.svg"
    assert run_cli("pareto", seventy_b(), "--plot", out).exit_code == 0
    svg = out.read_text()
    assert svg.count('id="uncertainty') == 2  # the hours bars and the cost bars
    assert "10th-90th percentile of held-out errors" in svg


def test_pareto_plot_with_unknown_format_is_a_one_line_error(run_cli, tmp_path: Path):
    res = run_cli("pareto", seventy_b(), "--plot", tmp_path / "front.gif")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "use a .png or .svg file" in res.stderr
    assert not (tmp_path / "front.gif").exists()


def test_pareto_table_marks_the_chosen_plan(run_cli):
    res = run_cli("pareto", seventy_b())
    assert res.exit_code == 0
    assert "non-dominated plans" in res.stdout and "proven optimal" in res.stdout
    assert len(re.findall(r"^ \* ", res.stdout, re.M)) == 1  # one row starts with the chosen marker


def test_pareto_help_ends_with_examples(run_cli):
    res = run_cli("pareto", "--help")
    assert "Examples:" in res.stdout and "ftopt pareto scenarios/70b.yaml" in res.stdout


def test_a_sweep_whose_epsilon_bound_is_ignored_stops_with_an_error(monkeypatch, lora_space):
    # the bug that once hung the suite: a solve that drops the deadline constraint returns the same point forever;
    # the sweep must stop after one stage per candidate (+1) with a clear error instead
    n = 12
    space = dataclasses.replace(lora_space, cand=lora_space.cand.take(np.arange(n)),
                                cost_total=lora_space.cost_total[:n], bills=lora_space.bills[:n])  # fmt: skip
    real = pareto_mod.solve

    def no_deadline(sp, objective, limits, *args, **kwargs):
        return real(sp, objective, limits.replace(deadline_s=None), *args, **kwargs)

    monkeypatch.setattr(pareto_mod, "solve", no_deadline)
    with pytest.raises(RuntimeError, match=rf"did not end after {n + 1} stages"):
        front(space, Limits(), Objective.cost)


def test_the_deadline_bound_moves_every_stage_forward(lora_space):
    # each stage's time is strictly below the previous stage's: the epsilon bound is what ends the sweep
    fr = front(lora_space, Limits(deadline_s=200 * 3600), Objective.cost)
    times = [p.time_s for p in fr.points]
    assert times and times[0] <= 200 * 3600
    assert all(b < a for a, b in zip(times, times[1:], strict=False))
    assert fr.solves <= len(lora_space.cand) + 2


def test_relevant_candidates_are_not_dominated(lora_space):
    # the reduction hands CP-SAT only candidates that no other admitted candidate strictly dominates
    space = lora_space
    keep = relevant(space, Limits())
    cost_c = [ceil_cents(exact(v)) for v in space.cost_total]
    time_s = [ceil_seconds(float(v)) for v in space.cand.time["hours"]]
    points = list(zip(cost_c, time_s, strict=True))
    assert 0 < keep.sum() < len(points)
    for i in map(int, np.flatnonzero(keep)):
        assert not any(_dominates(q, points[i]) for q in points), i


def test_an_equal_cost_slower_plan_is_dominated():
    """Dominance is <= on both axes with one strict: at equal cost the slower plan is dropped, at equal cost and time
    both are kept (the relevant-candidate filter and each GPU's alternatives rely on it)."""
    from optimizer.solve.dominance import nondominated

    cost = np.array([1000, 1000, 1000, 900])
    time = np.array([5, 7, 5, 9])
    assert nondominated(cost, time, np.ones(4, dtype=bool)).tolist() == [True, False, True, True]

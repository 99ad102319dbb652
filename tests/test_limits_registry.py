"""Every user limit of the registry behaves the same in solve, pareto, portfolio and the explanations.

For each entry of optimizer.solve.limits.REGISTRY the test makes the limit bind, then checks against independent
readings of the candidates (RAW below: plain attribute reads and the validator's exact decimal rounding, not
optimizer.solve.limits.column) that: solve and the front agree on feasibility and on the chosen plan; the explanation
names the limit's scenario field and its suggested value restores a plan; the portfolio's filter admits exactly the
candidates the limit admits (or, for limits the portfolio replaces, all of them). A new entry without a RAW reading
and a binding recipe fails test_every_limit_has_an_independent_reading.
"""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction

import numpy as np
import pytest
import yaml

from optimizer.inputs.catalog import load_catalog, resolve_model
from optimizer.inputs.schema import Objective, Scenario, Status
from optimizer.portfolio.plan import _allowed
from optimizer.solve.explain import explain
from optimizer.solve.limits import BY_KEY, REGISTRY, SOLVER_KEYS, Limits, limits_from
from optimizer.solve.pareto import front, pareto_scenario
from optimizer.solve.planner import solve_scenario
from optimizer.solve.solver import SolverSettings, solve
from optimizer.solve.space import Space, build
from optimizer.solve.validator import ceil_cents, ceil_seconds

from .conftest import REPO, scenario_doc

SETTINGS = SolverSettings()
FULL = {"method": "full", "lora": None, "global_batch": 256}


def _offer(sp: Space, i: int):
    return sp.offers[int(sp.cand.offer_idx[i])]


RAW = {  # limit key -> the candidate's value, read independently of optimizer.solve.limits
    "gpus": lambda sp, i: _offer(sp, i).gpu,
    "providers": lambda sp, i: _offer(sp, i).provider.lower(),
    "max_cards": lambda sp, i: int(sp.cand.cards[i]),
    "max_nodes": lambda sp, i: int(sp.cand.nodes[i]),
    "budget_cents": lambda sp, i: ceil_cents(Fraction(float(sp.cost_total[i]))),
    "deadline_s": lambda sp, i: ceil_seconds(
        float(sp.cand.time["hours"][i] + sp.cand.time.get("deadline_margin_hours", np.zeros(len(sp.cand)))[i])
    ),
    "max_host_memory_gib": lambda sp, i: float(sp.cand.mem["cpu_offload"][i]) / 2**30,
}


def _meets(key: str, value, raw) -> bool:
    return value is None or (raw in value if BY_KEY[key].kind == "names" else raw <= value)


def _ok(sp: Space, limits: Limits, i: int) -> bool:
    return all(_meets(k, getattr(limits, k), RAW[k](sp, i)) for k in limits.active())


@functools.cache
def _space() -> Space:
    """An 8B full fine-tune over every built-in offer: big enough that two nodes beat one (max_nodes can bind)."""
    sc = Scenario.model_validate(scenario_doc(**FULL))
    catalog = load_catalog()
    return build(sc, catalog, resolve_model(sc, catalog))


def _binding(sp: Space, key: str) -> Limits:
    """Limits where ``key`` alone makes the space infeasible: it excludes the fastest plan, a deadline the rest."""
    n = len(sp.cand)
    if BY_KEY[key].monotone:  # just below the best value of its own column
        return Limits(**{key: min(RAW[key](sp, i) for i in range(n)) - 1})
    times = [RAW["deadline_s"](sp, i) for i in range(n)]
    fastest = [i for i in range(n) if times[i] == min(times)]
    if BY_KEY[key].kind == "names":
        value = frozenset(RAW[key](sp, i) for i in range(n)) - {RAW[key](sp, i) for i in fastest}
    else:  # the largest bound that leaves only plans slower than the fastest
        levels = sorted({RAW[key](sp, i) for i in range(n)}, reverse=True)
        value = next((v - 1 for v in levels
                      if min((times[i] for i in range(n) if RAW[key](sp, i) < v), default=0) > min(times)), None)
    admitted = [times[i] for i in range(n) if _meets(key, value, RAW[key](sp, i))]
    assert admitted and min(admitted) > min(times), f"{key}: no plan is left that the fastest does not beat"
    return Limits(**{key: value, "deadline_s": min(admitted) - 1})


def _worded(sp: Space, limits: Limits) -> Space:
    """The space with its scenario's budget and deadline set to ``limits`` (the explanation quotes them)."""
    update: dict = {}
    if limits.budget_cents is not None:
        update["budget"] = {"amount": limits.budget_cents / 100, "currency": sp.currency}
    if limits.deadline_s is not None:
        update["deadline_hours"] = limits.deadline_s / 3600
    sc = Scenario.model_validate({**sp.scenario.model_dump(mode="json", exclude_none=True), **update})
    return dataclasses.replace(sp, scenario=sc)


def _applied(limits: Limits, key: str, option_value) -> Limits:
    spec = BY_KEY[key]
    if spec.relax == "cost":
        return limits.replace(**{key: int(round(option_value * 100))})
    if spec.relax == "time":
        return limits.replace(**{key: int(round(option_value * 3600))})
    if spec.relax == "names":
        return limits.replace(**{key: getattr(limits, key) | set(option_value)})
    return limits.replace(**{key: option_value})


def test_every_limit_has_an_independent_reading_and_limits_know_every_solver_key():
    assert set(RAW) == {spec.key for spec in REGISTRY}
    assert Limits().active() == [] and set(Limits(**{k: 1 for k in SOLVER_KEYS}).active()) == set(SOLVER_KEYS)
    assert [spec.key for spec in REGISTRY if spec.kind != "space"] == list(SOLVER_KEYS)
    with pytest.raises(TypeError):
        Limits(max_power_kw=1)


@pytest.mark.parametrize("key", SOLVER_KEYS)
def test_a_binding_limit_is_infeasible_in_solve_and_pareto_and_its_relaxation_restores_a_plan(key, catalog):
    sp = _space()
    limits = _binding(sp, key)
    assert not any(_ok(sp, limits, i) for i in range(len(sp.cand)))  # the oracle: no plan meets them
    assert solve(sp, Objective.cost, limits, SETTINGS).index is None
    assert front(sp, limits, Objective.cost).points == []
    rel = explain(_worded(sp, limits), Objective.cost, limits, SETTINGS, catalog)
    field = BY_KEY[key].field
    option = next(o for o in rel.options if o.field == field)
    assert field in rel.binding or option.text in rel.message  # named as what binds, or as a change that helps
    fixed = _applied(limits, key, option.value)
    chosen = solve(sp, Objective.cost, fixed, SETTINGS).index
    assert chosen is not None and _ok(sp, fixed, chosen)
    assert front(sp, fixed, Objective.cost).chosen == chosen


@pytest.mark.parametrize("key", SOLVER_KEYS)
@pytest.mark.parametrize("objective", [Objective.cost, Objective.time])
def test_a_limit_that_binds_feasibly_gives_the_oracle_optimum_in_solve_and_on_the_front(key, objective):
    sp = _space()
    n = len(sp.cand)
    cheapest = min(range(n), key=lambda i: (RAW["budget_cents"](sp, i), RAW["deadline_s"](sp, i)))
    fastest = min(range(n), key=lambda i: (RAW["deadline_s"](sp, i), RAW["budget_cents"](sp, i)))
    if key == "deadline_s":  # excludes the cheapest plan
        limits = Limits(deadline_s=RAW[key](sp, cheapest) - 1)
    elif key == "budget_cents":  # excludes the fastest plan
        limits = Limits(budget_cents=RAW[key](sp, fastest) - 1)
    else:  # excludes the fastest plan (the one that binds, with a deadline, in _binding)
        limits = Limits(**{key: getattr(_binding(sp, key), key)})
    ok = [i for i in range(n) if _ok(sp, limits, i)]
    assert ok, key
    first, second = ("budget_cents", "deadline_s") if objective is Objective.cost else ("deadline_s", "budget_cents")
    expect = min((RAW[first](sp, i), RAW[second](sp, i)) for i in ok)
    chosen = solve(sp, objective, limits, SETTINGS).index
    assert chosen is not None and _ok(sp, limits, chosen)
    assert (RAW[first](sp, chosen), RAW[second](sp, chosen)) == expect
    fr = front(sp, limits, objective)
    assert fr.chosen == chosen and all(_ok(sp, limits, p.index) for p in fr.points)


@pytest.mark.parametrize("spec", [s for s in REGISTRY if s.kind != "space"], ids=lambda s: s.key)
def test_the_portfolio_filter_admits_what_the_limit_admits(spec):
    """(Limits of kind ``space`` are applied by space.evaluate for the portfolio as for solve.)"""
    sp = _space()
    n = len(sp.cand)
    rows = np.arange(n)
    doc = scenario_doc(**FULL)
    # the column's median (not the middle row's value: the rows' order is the space's, and the 128-card plan that sat
    # there admitted every row)
    pick = sorted(RAW[spec.key](sp, i) for i in range(n))[n // 2]
    scenario_value = {
        "gpus": lambda: [pick], "providers": lambda: [pick.upper()], "max_cards": lambda: pick,
        "max_nodes": lambda: pick, "budget_cents": lambda: pick / 100,
        "deadline_s": lambda: pick / 3600,
    }[spec.key]()  # fmt: skip
    section, _, name = spec.field.rpartition(".")
    if section:
        doc.setdefault(section, {"currency": "USD"} if section == "budget" else {})[name] = scenario_value
    else:
        doc[name] = scenario_value
    sc = Scenario.model_validate(doc)
    kept = set(_allowed(sp, rows, sc, sorted(sc.allow.gpus) if sc.allow.gpus else None).tolist())
    limits = limits_from(Space(sp.job, sc, sp.offers, sp.gpus, sp.currency, sp.fx, sp.cand, sp.cost_total, sp.bills,
                               sp.enumerated, sp.fitting, accuracy={}), sc.allow.gpus)  # fmt: skip
    value = getattr(limits, spec.key)
    assert value is not None
    expect = {i for i in rows if _meets(spec.key, value, RAW[spec.key](sp, i))} if spec.in_portfolio else set(rows)
    assert kept == expect and (not spec.in_portfolio or len(expect) < n)


def test_a_host_memory_limit_binds_the_same_in_solve_pareto_and_the_explanation(tmp_path):
    doc = yaml.safe_load((REPO / "scenarios/70b.yaml").read_text())
    doc["allow"]["max_host_memory_gib"] = 1000
    doc["catalog"] = "cn"  # single-node offers: 70B full fine-tuning there must offload
    path = tmp_path / "70b-host.yaml"
    path.write_text(yaml.safe_dump(doc))
    solved, front_ = solve_scenario(path), pareto_scenario(path)
    assert solved.best.status is Status.infeasible and front_.estimates == []
    field = BY_KEY["max_host_memory_gib"].field
    option = next(o for o in solved.relaxation.options if o.field == field)
    assert field in solved.relaxation.message and front_.relaxation.options == solved.relaxation.options
    doc["allow"]["max_host_memory_gib"] = option.value
    path.write_text(yaml.safe_dump(doc))
    solved, front_ = solve_scenario(path), pareto_scenario(path)
    assert solved.best.status is Status.optimal and front_.estimates[front_.chosen].plan == solved.best.plan
    assert solved.best.memory.cpu_offload <= option.value * 2**30


def _oracle_front(cost: np.ndarray, time: np.ndarray, keep: np.ndarray) -> set[tuple[int, int]]:
    """(cost, time) of the rows of ``keep`` that no other row of ``keep`` dominates, by a plain sweep."""
    pts = sorted({(int(c), int(t)) for c, t, k in zip(cost, time, keep, strict=True) if k})
    out, best_t = set(), None
    for c, t in pts:  # by cost, then time: a point is on the front when it is faster than every cheaper one
        if best_t is None or t < best_t:
            out.add((c, t))
            best_t = t
    return out


@pytest.mark.parametrize("key", [k for k in SOLVER_KEYS if not BY_KEY[k].monotone])
def test_the_front_under_a_limit_is_the_front_of_the_plans_it_admits(key):
    """A value of the limit under which an excluded plan dominates an admitted one (the case a front that
    forgot the limit gets wrong), found by the oracle; the front must equal the oracle's front of admitted plans."""
    sp = _space()
    n = len(sp.cand)
    cost = np.array([RAW["budget_cents"](sp, i) for i in range(n)])
    time = np.array([RAW["deadline_s"](sp, i) for i in range(n)])
    raw = [RAW[key](sp, i) for i in range(n)]
    everyone = _oracle_front(cost, time, np.ones(n, dtype=bool))
    if BY_KEY[key].kind == "names":
        values = [frozenset(raw) - {name} for name in sorted(set(raw))]
    else:
        values = sorted(set(raw))
    cases = []
    for value in values:
        keep = np.array([_meets(key, value, r) for r in raw])
        expect = _oracle_front(cost, time, keep)
        cases.append((value, expect))
        if expect and not expect <= everyone:  # some admitted front point is dominated by an excluded plan
            cases = cases[-1:]
            break
    # (when no value gives that case, here for max_nodes, every value is checked: the front still has to match)
    for value, expect in cases:
        fr = front(sp, Limits(**{key: value}), Objective.cost)
        assert {(p.cost_cents, p.time_s) for p in fr.points} == expect, value

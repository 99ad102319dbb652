"""Issue 20 item 5: the scenario's ``tolerance`` keeps the objective from buying a tiny gain with a large loss.

Rule (docs/trade-offs.md): with v* the objective's optimum, the plan is the best on the other axis among plans whose
objective is at most floor(v* x (1 + tolerance)), then the best on the objective, then the simplest; then, while a
plan within the tolerance of the chosen one is at least twice as good on the other axis, the best such plan. The oracle
below applies it by plain loops over the candidates, with money and time rounded by the validator's exact decimal
ceilings (not solver.cents/seconds).
"""

from __future__ import annotations

import functools
import json
import math
from fractions import Fraction

import pytest

from optimizer.inputs.catalog import default_offer_files, load_catalog, resolve_model
from optimizer.inputs.schema import Objective, Scenario
from optimizer.solve.limits import Limits
from optimizer.solve.pareto import front, pareto_scenario
from optimizer.solve.planner import solve_scenario
from optimizer.solve.solver import SolverSettings, solve
from optimizer.solve.space import Space, build
from optimizer.solve.validator import ceil_cents, ceil_seconds

from .conftest import scenario_doc

SETTINGS = SolverSettings()


DATA = {"data": {"tokens": 2.0e8, "epochs": 1}, "catalog": "us"}  # 8B LoRA, 200 M tokens, the us catalog


@functools.cache
def _space() -> Space:
    sc = Scenario.model_validate(scenario_doc(**DATA))
    catalog = load_catalog([f for f in default_offer_files() if f.name == "us.yaml"])
    return build(sc, catalog, resolve_model(sc, catalog))


def _axes(sp: Space) -> list[tuple[int, int]]:
    return [(ceil_cents(Fraction(float(sp.cost_total[i]))), ceil_seconds(float(sp.cand.time["hours"][i])))
            for i in range(len(sp.cand))]  # fmt: skip


def _points(sp: Space, objective: Objective) -> list[tuple[int, int]]:
    """(objective, other axis) of every candidate."""
    return _axes(sp) if objective is Objective.cost else [(t, c) for c, t in _axes(sp)]


def _halvings(pts: list[tuple[int, int]], objective: Objective, tolerance: float, start: tuple[int, int]
              ) -> tuple[int, int]:  # fmt: skip
    """(cost cents, time s) after the halving steps from ``start`` = (other axis, objective) of the chosen plan."""
    first, second = start
    while tolerance > 0:  # halving steps: a plan within tolerance of this one and twice as good on the other axis
        near = [(p[1], p[0]) for p in pts if p[0] <= math.floor(round(second * (1 + tolerance), 6))
                and 2 * p[1] <= first]  # fmt: skip
        if not near:
            break
        first, second = min(near)
    return (second, first) if objective is Objective.cost else (first, second)


def oracle(sp: Space, objective: Objective, tolerance: float) -> tuple[int, int]:
    """(cost cents, time s) of the plan the rule chooses."""
    pts = _points(sp, objective)
    band = math.floor(round(min(p[0] for p in pts) * (1 + tolerance), 6))
    # (other axis, objective) of the band's best, then the halving steps
    return _halvings(pts, objective, tolerance, min((p[1], p[0]) for p in pts if p[0] <= band))


def _chosen(sp: Space, i: int) -> tuple[int, int]:
    return _axes(sp)[i]


@pytest.mark.parametrize("objective", [Objective.cost, Objective.time])
@pytest.mark.parametrize("tolerance", [0.0, 0.05, 0.2])
def test_the_chosen_plan_is_the_oracles(objective, tolerance):
    sp = _space()
    out = solve(sp, objective, Limits(), SETTINGS, tolerance=tolerance)
    assert _chosen(sp, out.index) == oracle(sp, objective, tolerance)


# the case the rule exists for: the band holds a plan much better on the other axis. For time, the default 5% band
# does it; for cost it takes a 20% band: the cheapest plan (8.46 USD in 29.1 h) has nothing faster within 15% of its
# bill, and the next plan, 18.2% dearer (10.00 USD), is 14.7x faster (1.98 h)
@pytest.mark.parametrize(("objective", "tolerance"), [(Objective.cost, 0.20), (Objective.time, 0.05)])
def test_the_tolerance_trades_in_this_space(objective, tolerance):
    sp = _space()
    strict, loose = oracle(sp, objective, 0.0), oracle(sp, objective, tolerance)
    if objective is Objective.cost:  # premise: nothing faster within 15% of the cheapest bill, so 20% is the case
        assert oracle(sp, objective, 0.15) == strict
    assert strict != loose
    other = 1 if objective is Objective.cost else 0
    assert loose[other] < strict[other] and loose[1 - other] <= strict[1 - other] * (1 + tolerance) + 1


def test_solve_reports_what_was_traded_and_tolerance_zero_gives_the_optimum(write_scenario, run_cli):
    # objective time: in this space the default 5% band trades on time (see test_the_tolerance_trades_in_this_space)
    data = {**DATA, "objective": "time"}
    traded = solve_scenario(write_scenario(**data))
    strict = solve_scenario(write_scenario("strict.yaml", tolerance=0, **data))
    t = traded.trade_off
    assert t["tolerance"] == 0.05 and t["objective"] == "time"
    assert t["traded"] and not strict.trade_off["traded"] and strict.trade_off["text"] is None
    c, s = traded.best, strict.best
    assert t["optimum"] == {"cost": s.cost.total, "hours": s.time.hours}
    assert t["premium"] == pytest.approx(c.time.hours / s.time.hours - 1, abs=1e-5) and 0 < t["premium"] <= 0.05
    assert t["gain"] == pytest.approx(s.cost.total / c.cost.total, rel=1e-3) and t["gain"] > 1
    assert t["text"].startswith(f"{t['premium']:.1%} slower than the fastest plan, {t['gain']:.3g}x cheaper")
    assert "`tolerance: 0` gives the fastest" in t["text"]
    doc = json.loads(run_cli("solve", write_scenario(**data), "--json").stdout)
    assert doc["trade_off"] == t
    assert f"Trade-off: {t['text'][:30]}" in " ".join(run_cli("solve", write_scenario(**data)).stdout.split())


def test_the_front_marks_the_plan_solve_chooses_under_the_tolerance(write_scenario):
    path = write_scenario(**DATA)
    fr, best = pareto_scenario(path), solve_scenario(path).best
    assert fr.estimates[fr.chosen].plan == best.plan
    sp = _space()
    chosen = front(sp, Limits(), Objective.cost, tolerance=0.05).chosen
    assert _chosen(sp, chosen) == oracle(sp, Objective.cost, 0.05)


def test_no_default_plan_waits_twice_as_long_to_save_under_the_tolerance(tmp_path):
    # 70B QLoRA on the cn catalog (bench/expert_review.py's user-like grid) with no headroom beyond the p90 band: the
    # 5% band from the cheapest plan (374.00 CNY, 84.8 h) holds 8 x RTX-A6000 (387.20 CNY, 21.3 h), and 8 x H100-PCIe
    # costs 397.44 CNY in 5.8 h: 2.6% more than that plan for a quarter of its hours. The halving step takes it. (The
    # default 5% headroom gives the same plan at today's uncovered-cell p90, 1.168; at 1.174 it did not fit, so the
    # premise pins headroom 0 rather than depend on the third decimal of a held-out band.)
    doc = {"name": "q70", "model": "Llama-3.1-70B", "method": "qlora", "data": {"tokens": 1.0e8, "epochs": 1},
           "seq_len": 4096, "global_batch": 64, "catalog": "cn", "headroom": 0.0}  # fmt: skip
    path = tmp_path / "q70.yaml"
    path.write_text(json.dumps(doc))
    best = solve_scenario(path).best
    front_doc = pareto_scenario(path)
    pts = list(zip(front_doc.costs, front_doc.hours, strict=True))
    assert best.plan is not None and best.cost is not None and best.time is not None
    for cost, hours in pts:  # nothing on the front pays < 5% more than the plan for half its hours or less
        assert not (cost < best.cost.total * 1.05 and hours * 2 <= best.time.hours), (cost, hours)
    cheapest = min(pts)
    assert best.cost.total > cheapest[0] * 1.05  # the premise: the plan lies beyond the first band


def _halving_only(sp: Space, objective: Objective, tolerance: float) -> tuple[int, int]:
    """(cost cents, time s) with rule 2 left out: the optimum, then only the halving steps (rule 4)."""
    pts = _points(sp, objective)
    best = min(p[0] for p in pts)
    return _halvings(pts, objective, tolerance, min((p[1], p[0]) for p in pts if p[0] == best))


# Rule 2 on its own: the band holds a plan better on the other axis, but less than twice as good, so the halving
# steps alone would not take it (lambda, cost, 20%: 14.93 USD in 1.07 h, not the cheapest 13.87 USD in 1.98 h; vast,
# time, 20%: 16.00 USD in 42 min, not the fastest's 18.82 USD in 37 min).
@pytest.mark.parametrize(("catalog", "objective"), [("lambda", Objective.cost), ("vast", Objective.time)])
def test_within_the_band_the_other_axis_decides_even_short_of_a_halving(catalog, objective):
    sc = Scenario.model_validate(scenario_doc(**{**DATA, "catalog": catalog}))
    cat = load_catalog([f for f in default_offer_files() if f.name == f"{catalog}.yaml"])
    sp = build(sc, cat, resolve_model(sc, cat))
    want = oracle(sp, objective, 0.2)
    assert want != _halving_only(sp, objective, 0.2)  # the premise: only rule 2 picks this plan
    assert _chosen(sp, solve(sp, objective, Limits(), SETTINGS, tolerance=0.2).index) == want

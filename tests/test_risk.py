"""Issue 20 item 4: plans are robust by default: the peak at the scenario's ``risk`` percentile of the memory model's
held-out error fits the card less headroom, and with ``risk_limits`` the deadline and budget hold at the slow end.

Expected values come from calibration.yaml's bands read here (not from the code under test): a plan fits at risk
r when total x ratio_r <= capacity x (1 - headroom); its slow-end hours and bill are the band's hours_p90 and
total_p90 (optimizer/models/uncertainty.py band, a separate code path from space.limits_at_risk).
"""

from __future__ import annotations

import json

import pytest

from optimizer.inputs.schema import Status
from optimizer.solve.planner import estimate_scenario, solve_scenario

WARNING = "over the usable memory at the high end"
PACKED = {"catalog": "us", "headroom": 0.0, "plan": {"gpu": "RTX-4090"}}  # the cheapest plan packs a 24 GB card


def _fits_at(est, ratio: float, headroom: float) -> bool:
    return est.memory.total * ratio <= est.memory.capacity * (1 - headroom)


def test_the_default_plan_fits_at_the_p90_where_the_median_risk_plan_does_not(write_scenario, catalog, run_cli):
    band = catalog.calibration["accuracy"]["memory"]
    robust = solve_scenario(write_scenario(**PACKED)).best
    median = solve_scenario(write_scenario("p50.yaml", risk="p50", **PACKED)).best
    own = robust.uncertainty.memory.ratio_p90  # the plan's own band: the p90, widened for its cell (>= the p90)
    assert own >= band["ratio_p90"] and _fits_at(robust, own, 0.0) and robust.uncertainty.memory.fits_p90
    assert _fits_at(median, band["ratio_p50"], 0.0) and not _fits_at(median, band["ratio_p90"], 0.0)
    assert not median.uncertainty.memory.fits_p90
    assert robust.uncertainty.risk.level == "p90" and median.uncertainty.risk.level == "p50"
    text = " ".join(run_cli("solve", write_scenario(**PACKED)).stdout.split())
    assert WARNING not in text and f"planned at risk p90: peak x {own:g} = " in text


def test_risk_p99_fits_the_tail_ratio_and_refuses_a_configuration_that_fits_at_p90(write_scenario, catalog):
    band = catalog.calibration["accuracy"]["memory"]
    # 8B LoRA on one A100-80G, micro_batch 8 with full checkpointing: a peak of about 61% of the card, between
    # 0.95 / 1.704 and 0.95 / 1.26 of it
    pins = {"gpu": "A100-80G", "cards": 1, "micro_batch": 8, "checkpointing": "full", "zero_stage": 0,
            "offload": "none"}  # fmt: skip
    p90 = estimate_scenario(write_scenario(), pins)
    p99 = estimate_scenario(write_scenario("p99.yaml", risk="p99"), pins)
    assert _fits_at(p90, band["ratio_p90"], 0.05) and not _fits_at(p90, band["ratio_p99"], 0.05)
    assert p90.memory.fits and not p99.memory.fits
    best = solve_scenario(write_scenario("p99s.yaml", risk="p99")).best
    # at least the overall p99: a plan in a cell without a measured run is planned at the wider uncovered band
    ratio = best.uncertainty.risk.memory_ratio
    assert ratio >= band["ratio_p99"] and _fits_at(best, ratio, 0.05)


def test_risk_limits_keep_the_deadline_at_the_slow_end(write_scenario):
    plain = solve_scenario(write_scenario()).best
    hours, slow = plain.time.hours, plain.uncertainty.time.hours_p90
    deadline = round((hours + slow) / 2, 3)  # the cheapest plan meets it as predicted, not at its slow end
    expected = solve_scenario(write_scenario("d.yaml", deadline_hours=deadline)).best
    assert expected.plan == plain.plan and expected.uncertainty.time.meets_deadline_p90 is False
    robust = solve_scenario(write_scenario("r.yaml", deadline_hours=deadline, risk_limits=True)).best
    assert robust.status is Status.optimal and robust.plan != plain.plan
    assert robust.uncertainty.time.hours_p90 <= deadline + 1e-6 and robust.uncertainty.time.meets_deadline_p90
    assert robust.uncertainty.risk.applies_to == ["memory", "deadline", "budget"]


def test_a_deadline_missed_at_the_slow_end_points_to_risk_limits(write_scenario, run_cli):
    plain = solve_scenario(write_scenario()).best
    deadline = round((plain.time.hours + plain.uncertainty.time.hours_p90) / 2, 3)
    text = " ".join(run_cli("solve", write_scenario("d.yaml", deadline_hours=deadline)).stdout.split())
    assert "at the slow end: deadline MISSED; risk_limits: true chooses a plan that holds the deadline" in text
    robust = " ".join(run_cli("solve", write_scenario("r.yaml", deadline_hours=deadline, risk_limits=True))
                      .stdout.split())  # fmt: skip
    assert "at the slow end: deadline met" in robust and "risk_limits: true chooses" not in robust


def test_risk_limits_keep_the_budget_at_the_slow_end(write_scenario):
    big = {"data": {"tokens": 2.0e8, "epochs": 1}}  # 10 hours: the slow end's bill is hours more, not the same hour
    plain = solve_scenario(write_scenario(**big)).best
    budget = round((plain.cost.total + plain.uncertainty.cost.total_p90) / 2, 2)
    money = {"amount": budget, "currency": plain.cost.currency}
    expected = solve_scenario(write_scenario("b.yaml", budget=money, **big)).best
    assert expected.plan == plain.plan and expected.uncertainty.cost.within_budget_p90 is False
    robust = solve_scenario(write_scenario("r.yaml", budget=money, risk_limits=True, **big))
    if robust.best.status is Status.infeasible:  # then the explanation's budget is the slow-end bill of a plan
        assert robust.relaxation.budget_needed > budget
    else:
        cost = robust.best.uncertainty.cost
        assert cost.total_p90 <= budget + 1e-9 and cost.within_budget_p90


@pytest.mark.parametrize(("changes", "field"), [({"risk": "p75"}, "risk"),
                                                 ({"risk": "p99", "risk_limits": True}, "risk_limits")])
def test_a_risk_the_bands_do_not_have_is_a_one_line_error(run_cli, write_scenario, changes, field):
    result = run_cli("solve", write_scenario(**changes), "--json")
    assert result.exit_code == 2 and result.stdout == "" and field in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_json_says_which_risk_was_used(run_cli, write_scenario, catalog):
    ratio = catalog.calibration["accuracy"]["memory"]["ratio_p50"]  # calibration.yaml's median held-out ratio
    doc = json.loads(run_cli("solve", write_scenario(risk="p50"), "--json").stdout)
    assert doc["uncertainty"]["risk"]["level"] == "p50" and doc["uncertainty"]["risk"]["memory_ratio"] == ratio

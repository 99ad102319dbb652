"""Spot capacity: Young/Daly checkpoint interval, expected time with restarts, the solver's spot/on-demand choice."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from optimizer.models import interruptions
from optimizer.solve.planner import estimate_scenario, prepare, solve_scenario
from optimizer.solve.validator import check_plan

from .conftest import scenario_doc
from .test_offers_hosts import SRC, offer, write, write_offers


def test_young_daly_interval_is_sqrt_of_twice_save_time_times_mtbi():
    # C = 300 s, M = 10 h = 36,000 s: sqrt(2 x 300 x 36,000) = sqrt(21,600,000) = 4,647.58 s
    tau = interruptions.young_daly_interval_s(np.array([300.0]), np.array([36_000.0]))
    assert tau[0] == pytest.approx(4647.58, abs=0.01)


def test_expected_time_adds_saves_restarts_and_lost_work():
    # W = 36,000 s of work, C = 300 s, R = 900 s, S = 600 s, M = 360,000 s:
    # tau = sqrt(2 x 300 x 360,000) = 14,696.94; busy = 36,000 x (1 + 300 / 14,696.94) + 600 = 37,334.85;
    # share lost = (900 + (14,696.94 + 300) / 2) / 360,000 = 0.0233291; T = 37,334.85 / (1 - 0.0233291) = 38,226.6
    out = interruptions.expected_seconds(np.array([36_000.0]), np.array([300.0]), np.array([900.0]),
                                         np.array([600.0]), np.array([360_000.0]))  # fmt: skip
    assert out["interval"][0] == pytest.approx(14_696.94, abs=0.01)
    assert out["total"][0] == pytest.approx(38_226.6, abs=0.2)
    assert out["lost"][0] == pytest.approx(38_226.6 - 37_334.85, abs=0.2)


def test_expected_time_is_infinite_when_interruptions_outpace_restarts():
    out = interruptions.expected_seconds(np.array([36_000.0]), np.array([300.0]), np.array([3_000.0]),
                                         np.array([600.0]), np.array([2_000.0]))  # fmt: skip
    assert math.isinf(out["total"][0])


def test_a_job_over_more_nodes_is_interrupted_more_often():
    assert interruptions.job_mtbi_s(np.array([10.0, 10.0]), np.array([1, 4])).tolist() == [36_000.0, 9_000.0]


# ------------------------------------------------------------------------------------------------ the solver


def _spot_offer(spot_price: float, mtbi: tuple[float, float]) -> dict[str, Any]:
    band = {"mtbi_hours_low": mtbi[0], "mtbi_hours_high": mtbi[1], **SRC}
    return offer("spotty-a100", "A100-80G", 2.0, host={"local_disk_kind": "nvme", **SRC},
                 spot={"price": {"amount": spot_price, **SRC}, "interruptions": band})  # fmt: skip


def _scenario(tmp_path: Path, o: dict[str, Any], **changes: Any) -> Path:
    base = {"data": {"tokens": 2.0e8, "epochs": 1}, "allow": {"spot": True, "max_cards": 1},
            "catalog": str(write_offers(tmp_path, [o]))}  # fmt: skip
    doc = scenario_doc(**{**base, **changes})
    return write(tmp_path, doc)


def test_loose_deadline_runs_on_spot_when_its_expected_cost_is_lower(tmp_path):
    path = _scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)))
    best = solve_scenario(path).best
    assert best.plan is not None and best.time is not None and best.cost is not None and best.spot is not None
    assert best.plan.capacity == "spot"
    on_demand = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)), allow={"max_cards": 1})).best
    assert on_demand.plan.capacity == "on_demand"  # type: ignore[union-attr]
    assert best.time.hours > on_demand.time.hours  # type: ignore[union-attr]  # restarts and lost work cost time
    assert best.time.interruption_hours > 0
    assert best.cost.total < on_demand.cost.total  # type: ignore[union-attr]
    assert best.spot.hours_low <= best.time.hours <= best.spot.hours_high
    assert best.spot.cost_low <= best.cost.total <= best.spot.cost_high
    assert any(r.startswith("spot:") for r in best.requirements)
    sc, catalog, _ = prepare(path)
    assert check_plan(sc, catalog, best) == []


def test_spot_plan_states_the_young_daly_interval_for_the_band_mean_rate(tmp_path):
    best = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)))).best
    assert best.time is not None and best.plan is not None
    # mean rate (1/10 + 1/40) / 2 per hour -> M = 16 h on one node; tau = sqrt(2 C M) with C one save on NVMe
    est = estimate_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0))),
                            {**best.plan.model_dump(exclude={"billed_units", "term"})})  # fmt: skip
    assert est.plan.capacity == "spot"  # type: ignore[union-attr]
    assert est.time.checkpoint_interval_hours == pytest.approx(best.time.checkpoint_interval_hours)  # type: ignore[union-attr]
    m_s = 16.0 * 3600
    save_s = (best.time.checkpoint_interval_hours * 3600) ** 2 / (2 * m_s)
    assert 0 < save_s < 600  # one save of the LoRA adapters and their AdamW states on NVMe: seconds, not hours


def test_tight_deadline_runs_on_demand(tmp_path):
    loose = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)))).best
    assert loose.plan.capacity == "spot" and loose.spot is not None  # type: ignore[union-attr]
    on_demand_hours = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)),
                                               allow={"max_cards": 1})).best.time.hours  # type: ignore[union-attr]
    deadline = (on_demand_hours + loose.spot.hours_high) / 2  # on demand meets it, spot at its slow end does not
    tight = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)), deadline_hours=deadline)).best
    assert tight.plan is not None and tight.plan.capacity == "on_demand"


def test_on_demand_when_spot_interruptions_eat_the_discount(tmp_path):
    best = solve_scenario(_scenario(tmp_path, _spot_offer(1.95, (0.5, 1.0)))).best
    assert best.plan is not None and best.plan.capacity == "on_demand"


def test_spot_is_off_unless_the_scenario_allows_it(tmp_path):
    path = write(tmp_path, scenario_doc(data={"tokens": 2.0e8, "epochs": 1}, allow={"max_cards": 1},
                                        catalog=str(write_offers(tmp_path, [_spot_offer(0.1, (10.0, 40.0))]))))
    best = solve_scenario(path).best
    assert best.plan is not None and best.plan.capacity == "on_demand" and best.spot is None


def test_spot_without_a_published_band_uses_the_labelled_prior(tmp_path, catalog):
    # interruptions: null (as imported catalogs carry): with allow.spot and no deadline the cheap spot price is
    # taken with the calibration's fallback prior (provider TestCloud matches no entry), and the plan says so
    o = offer("no-band-a100", "A100-80G", 2.0, spot={"price": {"amount": 0.1, **SRC}, "interruptions": None})
    best = solve_scenario(_scenario(tmp_path, o)).best
    assert best.plan is not None and best.plan.capacity == "spot" and best.spot is not None
    prior = catalog.calibration["hosts"]["spot_prior"]["fallback"]
    assert (best.spot.mtbi_hours_low, best.spot.mtbi_hours_high) == (prior["mtbi_hours_low"], prior["mtbi_hours_high"])
    assert best.spot.assumption is not None and "ASSUMPTION" in best.spot.assumption
    assert any("publishes no interruption rate; the plan ASSUMES" in r for r in best.requirements)


def test_a_published_band_wins_over_the_prior(tmp_path):
    best = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)))).best
    assert best.spot is not None and best.spot.assumption is None
    assert (best.spot.mtbi_hours_low, best.spot.mtbi_hours_high) == (10.0, 40.0)


def test_imported_aws_spot_with_null_interruptions_is_chosen_and_labelled(tmp_path):
    # the shipped aws.yaml (SkyPilot import): every spot price has interruptions null; a 1-card job with no deadline
    # and allow.spot takes the spot price under the AWS prior (Spot Instance Advisor bands)
    doc = scenario_doc(catalog="aws", allow={"spot": True, "gpus": ["L40S"]})
    doc.pop("deadline_hours", None)
    best = solve_scenario(write(tmp_path, doc)).best
    assert best.plan is not None and best.plan.capacity == "spot" and best.spot is not None
    assert best.spot.assumption is not None and "Spot Instance Advisor" in best.spot.assumption
    assert (best.spot.mtbi_hours_low, best.spot.mtbi_hours_high) == (24.0, 3271.0)
    sc, catalog, _ = prepare(tmp_path / "scenario.yaml")
    assert check_plan(sc, catalog, best) == []


def test_interruption_band_must_be_ordered(tmp_path, run_cli):
    bad = _spot_offer(0.6, (40.0, 10.0))
    path = write_offers(tmp_path, [bad])
    result = run_cli("catalog", "validate", path)
    assert result.exit_code == 2 and "mtbi_hours_low must be <= mtbi_hours_high" in result.stderr
    assert yaml.safe_load(path.read_text())  # untouched


def test_the_deadline_an_explanation_lists_for_a_spot_plan_includes_its_slow_end(tmp_path):
    # A budget only the spot plan meets and a deadline it cannot: the deadline the explanation lists must be the
    # one the solver checks (the spot plan's pessimistic end), so that raising the deadline to it gives a plan.
    from optimizer.solve.planner import Overrides

    o = _spot_offer(0.6, (10.0, 40.0))
    spot = solve_scenario(_scenario(tmp_path, o)).best
    on_demand = solve_scenario(_scenario(tmp_path, o, allow={"max_cards": 1})).best
    assert spot.plan.capacity == "spot" and spot.cost.total < on_demand.cost.total  # type: ignore[union-attr]
    assert spot.spot is not None and spot.spot.hours_high > spot.time.hours + 0.05  # a margin that matters
    budget = (spot.cost.total + on_demand.cost.total) / 2  # type: ignore[union-attr]
    path = _scenario(tmp_path, o, budget={"amount": budget, "currency": "USD"}, deadline_hours=spot.time.hours / 2)
    result = solve_scenario(path)
    need = {x.field: x.value for x in result.relaxation.options}["deadline_hours"]
    assert need >= spot.spot.hours_high - 0.01
    assert solve_scenario(path, Overrides(deadline_hours=need)).best.status.value == "optimal"
    assert solve_scenario(path, Overrides(deadline_hours=need - 0.02)).best.status.value == "infeasible"


def test_a_spot_plan_quotes_the_spot_price_it_is_billed_at(tmp_path):
    """The offer block and the Rent line give the price the bill uses: on spot, the spot price and its source, not
    the on-demand list (which quoted 2.00 beside a bill at 0.60)."""
    from optimizer.report.plan import offer_lines

    best = solve_scenario(_scenario(tmp_path, _spot_offer(0.6, (10.0, 40.0)))).best
    assert best.plan.capacity == "spot"  # type: ignore[union-attr]
    assert {t: p.amount for t, p in best.offer.prices.items()} == {"hour": 0.6}  # type: ignore[union-attr]
    assert "0.6 USD per card-hour on spot capacity" in offer_lines(best)[0]
    assert best.cost.total == pytest.approx(best.plan.billed_units["hour"] * 0.6)  # type: ignore[union-attr]

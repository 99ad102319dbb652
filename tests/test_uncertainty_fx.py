"""The band's budget verdict converts the plan's bill into the budget's currency (catalogs/fx.yaml).

The base scenario's plan is billed in its offer's currency; a budget in the other currency is compared after
conversion at 1 USD = 6.7686 CNY (catalogs/fx.yaml, 2026-06-19 close).
"""

from __future__ import annotations

import pytest

from optimizer.solve.planner import estimate_scenario

PINS = {"gpu": "A100-80G", "cards": 2, "zero_stage": 3, "micro_batch": 2, "checkpointing": "full"}
USD_CNY = 6.7686


def test_the_p90_budget_verdict_converts_the_bill(write_scenario):
    first = estimate_scenario(write_scenario(), PINS)
    cur, total, high = first.cost.currency, first.cost.total, first.uncertainty.cost.total_p90
    assert cur in ("USD", "CNY") and total < high
    other, rate = ("CNY", USD_CNY) if cur == "USD" else ("USD", 1 / USD_CNY)
    # a budget between the bill and its 90th percentile, both converted: within at the prediction, not at p90
    mid = round((total + high) / 2 * rate, 2)
    est = estimate_scenario(write_scenario("mid.yaml", budget={"amount": mid, "currency": other}), PINS)
    assert est.cost.budget_currency == other
    assert est.cost.budget_currency_total == pytest.approx(total * rate, abs=0.011)
    assert est.uncertainty.cost.total_p90 == pytest.approx(high, abs=0.011)  # the band stays in the offer's currency
    assert est.uncertainty.cost.within_budget_p90 is False
    roomy = round(high * rate * 1.01, 2)
    est = estimate_scenario(write_scenario("roomy.yaml", budget={"amount": roomy, "currency": other}), PINS)
    assert est.uncertainty.cost.within_budget_p90 is True

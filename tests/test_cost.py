"""Rental billing (optimizer/models/cost.py): whole billing units, term choice, mixed terms, currency, per-card bills.

Prices are synthetic (P per card-hour) so each expected bill is worked by hand in a comment.
"""

from __future__ import annotations

import json
import re
from datetime import date

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Term
from optimizer.inputs.schema_catalog import Offer
from optimizer.models import cost

P = 2.0  # price per card-hour


def _offer(increment_s: int = 3600, **prices: float) -> Offer:
    """A one-node offer with the given term prices (default: hourly only)."""
    table = prices or {"hour": P}
    return Offer(
        id="test-offer", provider="test", gpu="A100-80G", cards_per_node=8, hour_increment_s=increment_s,
        prices={t: {"amount": a, "source": "synthetic test", "as_of": date(2026, 1, 1)} for t, a in table.items()},
    )  # fmt: skip


def test_a_started_hour_is_a_paid_hour():
    b = cost.bill(2.1, _offer())  # ceil(2.1) = 3 hours
    assert (b.units, b.per_card) == ({"hour": 3}, pytest.approx(3 * P))


def test_exact_hours_are_not_rounded_up_by_float_noise():
    assert cost.bill(3.0000000001, _offer()).units == {"hour": 3}


def test_per_second_billing_charges_the_seconds_used():
    b = cost.bill(2.1, _offer(increment_s=1))  # 2.1 h = 7,560 s at P / 3600 each
    assert (b.units, b.per_card) == ({"second": 7560}, pytest.approx(2.1 * P))


def test_per_minute_billing_rounds_up_to_the_minute():
    b = cost.bill(2.01, _offer(increment_s=60))  # 120.6 min -> 121 min at P / 60 each
    assert (b.units, b.per_card) == ({"minute": 121}, pytest.approx(121 * P / 60))


def test_a_200_hour_job_stays_hourly_when_the_month_costs_more():
    offer = _offer(hour=P, month=0.6 * P * 720)  # month = 432 P; 200 hours = 200 P
    assert cost.bill(200.0, offer).units == {"hour": 200}


def test_the_month_is_chosen_where_it_is_cheaper_than_the_hours():
    offer = _offer(hour=P, month=0.6 * P * 720)  # 450 hours = 450 P > 432 P
    b = cost.bill(450.0, offer)
    assert (b.units, b.per_card) == ({"month": 1}, pytest.approx(432 * P))


def test_terms_mix_when_cheaper_one_month_plus_30_hours():
    offer = _offer(hour=P, month=0.6 * P * 720)  # 750 h: 750 P hourly, 864 P for 2 months, 462 P for month + 30 h
    b = cost.bill(750.0, offer)
    assert (b.units, b.per_card, b.term) == ({"month": 1, "hour": 30}, pytest.approx(462 * P), "month+hour")


def test_day_and_week_terms_cover_the_job():
    offer = _offer(hour=P, day=20 * P, week=100 * P)  # 8 days = 192 h: week + day = 120 P < 8 days 160 P < 192 P
    assert cost.bill(192.0, offer).units == {"week": 1, "day": 1}


def test_a_pinned_term_is_the_only_one_used():
    offer = _offer(hour=P, month=0.6 * P * 720)
    assert cost.bills(np.array([750.0]), offer, frozenset([Term.hour]))[0].units == {"hour": 750}


def test_a_pinned_term_the_offer_does_not_price_is_infinite():
    assert cost.bill(10.0, _offer(), frozenset([Term.week])).per_card == float("inf")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 2000.0), min_size=2, max_size=20))
def test_the_bill_never_falls_as_the_job_gets_longer(hours):
    offer = _offer(hour=P, day=20 * P, week=100 * P, month=0.6 * P * 720)
    ordered = np.sort(np.array(hours))
    totals = [b.per_card for b in cost.bills(ordered, offer)]
    assert all(a <= b + 1e-9 for a, b in zip(totals, totals[1:], strict=False))


@settings(max_examples=40, deadline=None)
@given(st.floats(0.01, 3000.0))
def test_the_cheapest_mix_is_never_dearer_than_hourly_or_whole_months(hours):
    offer = _offer(hour=P, day=20 * P, week=100 * P, month=0.6 * P * 720)
    best = cost.bill(hours, offer).per_card
    assert best <= np.ceil(hours - 1e-9) * P + 1e-9
    assert best <= np.ceil(hours / 720 - 1e-12) * 0.6 * P * 720 + 1e-9


def test_currency_without_a_rate_is_a_one_line_error(catalog):
    with pytest.raises(InputError, match=r"^s\.yaml: budget\.currency: no exchange rate USD->EUR in catalogs/fx\.yaml"):
        cost.fx_rate(catalog, "USD", "EUR", "s.yaml")


def test_rates_are_used_both_ways(catalog):
    usd_cny = cost.fx_rate(catalog, "USD", "CNY")
    assert cost.fx_rate(catalog, "CNY", "USD") == pytest.approx(1 / usd_cny)


def test_cli_rejects_a_budget_currency_without_a_rate(run_cli, write_scenario):
    path = write_scenario(budget={"amount": 1000, "currency": "EUR"}, catalog="catalogs/offers/us.yaml")
    result = run_cli("solve", path)
    assert result.exit_code == 2
    assert re.fullmatch(r".*scenario\.yaml: budget\.currency: no exchange rate \w{3}->EUR in catalogs/fx\.yaml "
                        r"\(offer \S+ is priced in \w{3}\)[^\n]*\n", result.stderr), result.stderr  # fmt: skip


def test_multi_node_jobs_are_billed_per_card(run_cli, write_scenario, catalog):
    path = write_scenario(model="Llama-3.1-70B", method="full", lora=None, global_batch=64)
    result = run_cli("estimate", path, "--gpu", "H100-SXM", "--offer", "aws-p5-h100", "--cards", "16", "--zero", "3",
                     "--micro-batch", "1", "--checkpointing", "full", "--json")  # fmt: skip
    assert result.exit_code in (0, 1), result.output  # 1: answered, the configuration does not fit
    out = json.loads(result.stdout)
    offer = next(o for o in catalog.offers if o.id == "aws-p5-h100")
    per_card = cost.bill(out["time"]["hours"], offer).per_card
    assert out["plan"]["nodes"] == 2
    assert out["cost"]["total"] == pytest.approx(16 * per_card, rel=1e-4)  # hours are rounded to 1e-6 in JSON
    assert out["cost"]["currency"] == offer.currency


def test_objective_time_and_cost_choose_different_plans(run_cli, write_scenario):
    # 8B LoRA on 2e8 tokens: the cheapest plan rents few cheap cards for long; the fastest rents many fast ones.
    path = write_scenario(data={"tokens": 2.0e8, "epochs": 1}, catalog="catalogs/offers/us.yaml")
    by_cost = json.loads(run_cli("solve", path, "--objective", "cost", "--json").stdout)
    by_time = json.loads(run_cli("solve", path, "--objective", "time", "--json").stdout)
    plan = lambda out: (out["plan"]["offer"], out["plan"]["cards"])  # noqa: E731
    assert plan(by_cost) != plan(by_time)
    assert by_time["time"]["hours"] < by_cost["time"]["hours"]
    assert by_cost["cost"]["total"] < by_time["cost"]["total"]


def test_hourly_bills_of_many_offers_at_once_are_each_offers_own_bills():
    """space.bill_rows bills every hour-only offer's rows in one call; each bill must be the one bills() gives."""
    from optimizer.inputs.catalog import load_catalog

    offers = [o for o in load_catalog().offers if cost.hourly_only(o)]
    assert len({o.hour_increment_s for o in offers}) >= 2  # per-hour and finer increments side by side
    rng = np.random.default_rng(0)
    hours = np.concatenate([rng.uniform(0, 3000, 300), [0.0, 1.0, 24.0, 1e-12, 719.999999999]])
    picks = rng.integers(0, len(offers), hours.size)
    price = np.array([offers[i].prices[Term.hour].amount for i in picks])
    increment = np.array([offers[i].hour_increment_s for i in picks])
    together = cost.hourly_bills(hours, price, increment)
    alone = [cost.bills(np.array([h]), offers[i])[0] for h, i in zip(hours, picks, strict=True)]
    assert together == alone
    assert not cost.hourly_only(offers[0], frozenset([Term.month]))  # a pinned month is not hourly time

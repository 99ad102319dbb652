"""Portfolio figures checked against numbers worked out by hand: currencies, electricity of multi-card pools.

Fixtures as in tests/test_portfolio.py: a made-up CNY catalog (a per-second RTX 4090 at 3 CNY per card-hour and an
A100 with a month price) and the 8B LoRA builder scenario.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from optimizer.portfolio.plan import plan_portfolio
from optimizer.portfolio.schedule import Occurrence, Problem, Rental, Run, solve
from optimizer.report.html import portfolio_page
from optimizer.report.portfolio import print_portfolio

from .conftest import scenario_doc
from .test_portfolio import OFFERS, write_portfolio

USD_CNY = 6.7686  # catalogs/fx.yaml: 1 USD = 6.7686 CNY (2026-06-19 close)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "offers.yaml").write_text(yaml.safe_dump(OFFERS, sort_keys=False))
    for name, tokens in (("small", None), ("big", {"tokens": 6.0e7, "epochs": 1})):
        doc = scenario_doc(catalog="offers.yaml", **({"data": tokens} if tokens else {}))
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return tmp_path


def test_a_usd_portfolio_over_cny_offers_costs_the_cny_total_over_the_rate(folder: Path):
    # Every price is converted by the same rate, so the optimal schedule is the same and its cost scales by
    # 1 / 6.7686 (to within the 1/100-cent rounding of the model's coefficients and the half cent to which each
    # reported total is rounded).
    cny = plan_portfolio(write_portfolio(folder))
    usd = plan_portfolio(write_portfolio(folder, currency="USD"))
    assert (cny.status, usd.status) == ("optimal", "optimal")
    assert cny.cost["currency"] == "CNY" and usd.cost["currency"] == "USD"
    assert cny.cost["total"] > 10.0  # a real bill, not a degenerate zero
    assert usd.cost["total"] == pytest.approx(cny.cost["total"] / USD_CNY, rel=2e-4, abs=0.005)
    assert usd.cost["rent"] == pytest.approx(cny.cost["rent"] / USD_CNY, rel=2e-4, abs=0.005)


def test_a_usd_portfolio_of_one_solo_rental_costs_its_cny_bill_over_the_rate(folder: Path):
    # One occurrence of the small job, only on the per-second RTX 4090 (3 CNY per card-hour): a solo rental.
    (folder / "one.yaml").write_text(yaml.safe_dump(scenario_doc(
        catalog="offers.yaml", allow={"gpus": ["RTX-4090"], "max_cards": 1}), sort_keys=False))  # fmt: skip
    jobs = [{"name": "one", "scenario": "one.yaml", "release_day": 0, "due_day": 10}]
    usd = plan_portfolio(write_portfolio(folder, currency="USD", jobs=jobs))
    [job] = usd.jobs
    [rental] = usd.rentals
    assert (job["where"], job["cards"], rental["offer"]) == ("rented", 1, "t-4090")
    seconds = rental["units"]["second"]
    # per-second billing: the bill is seconds x 3 CNY / 3600 per card, in USD at 6.7686 CNY per USD
    assert usd.cost["total"] == pytest.approx(seconds * 3.0 / 3600 / USD_CNY, abs=0.011)


def test_the_rentals_table_writes_billed_seconds_with_thousands_separators_as_the_plan_does(folder: Path):
    # the Rentals table printed "24782 second" where the rest of the output writes 24,782
    (folder / "one.yaml").write_text(yaml.safe_dump(scenario_doc(
        catalog="offers.yaml", allow={"gpus": ["RTX-4090"], "max_cards": 1}), sort_keys=False))  # fmt: skip
    path = write_portfolio(folder, jobs=[{"name": "one", "scenario": "one.yaml", "release_day": 0, "due_day": 10}])
    result = plan_portfolio(path)
    seconds = result.rentals[0]["units"]["second"]
    assert seconds >= 1000
    console = Console(file=io.StringIO(), width=250)
    print_portfolio(result, console)
    said = f"{seconds:,} s ({seconds / 3600:,.2f} h)"
    assert said in console.file.getvalue() and said in portfolio_page(result, str(path))


def test_electricity_is_paid_for_every_card_of_a_pool_run(folder: Path):
    # The job pinned to 2 RTX 4090s on an owned pool of 4 (450 W each, 0.8 CNY/kWh): 0.36 CNY per card-hour,
    # 0.72 CNY per hour of the run, far below renting the same cards at 3 CNY per card-hour.
    (folder / "two.yaml").write_text(yaml.safe_dump(scenario_doc(
        catalog="offers.yaml", plan={"gpu": "RTX-4090", "cards": 2}), sort_keys=False))  # fmt: skip
    jobs = [{"name": "two", "scenario": "two.yaml", "release_day": 0, "due_day": 10}]
    owned = [{"gpu": "RTX-4090", "cards": 4, "power_w": 450}]
    result = plan_portfolio(write_portfolio(folder, jobs=jobs, owned=owned, electricity_per_kwh=0.8))
    [job] = result.jobs
    assert (job["where"], job["cards"]) == ("owned", 2)
    hours = job["end_hours"] - job["start_hours"]
    assert hours > 0.5
    assert result.cost["power"] == pytest.approx(2 * hours * 0.45 * 0.8, abs=0.011)
    assert result.cost["total"] == pytest.approx(result.cost["power"], abs=0.011)


def test_a_shared_week_block_is_found_when_the_week_is_the_cheapest_long_unit():
    # One card billed 3/h, 200/week or 600/month. Two 50-hour jobs, both free in the first week: alone each pays
    # min(50 x 3, 200, 600) = 150, together 300; run one after the other inside one week block (100 h of a 168-h
    # week) they pay 200. The optimum is 200, with both jobs in one block billed one week.
    rental = Rental("a", "A100-80G", {"hour": 3.0, "week": 200.0, "month": 600.0}, 3600, (1,))
    run = Run("rent", 0, 1, 50, 50.0, 150.0, 0)
    occurrences = (Occurrence(0, 0, 0, 168, (run,)), Occurrence(1, 0, 0, 168, (run,)))
    schedule = solve(Problem(3600, 720, occurrences, (), (rental,)))
    assert schedule.status == "optimal"
    assert schedule.objective == pytest.approx(200.0)
    assert [(b.members, b.units) for b in schedule.blocks] == [((0, 1), {"week": 1})]


def test_renting_or_running_an_owned_card_compares_both_in_the_portfolio_currency(folder: Path):
    # An owned RTX 4090 (450 W) at 2.0 per kWh costs 0.9 per card-hour in the portfolio's currency. The rental is
    # 3 CNY per card-hour: 3 / 6.7686 = 0.443 USD, cheaper than 0.9 USD, so a USD portfolio rents; a CNY portfolio
    # (0.9 CNY against 3 CNY) runs on the owned card.
    (folder / "one.yaml").write_text(yaml.safe_dump(scenario_doc(
        catalog="offers.yaml", allow={"gpus": ["RTX-4090"], "max_cards": 1}), sort_keys=False))  # fmt: skip
    jobs = [{"name": "one", "scenario": "one.yaml", "release_day": 0, "due_day": 10}]
    owned = [{"gpu": "RTX-4090", "cards": 1, "power_w": 450}]
    usd = plan_portfolio(write_portfolio(folder, currency="USD", jobs=jobs, owned=owned, electricity_per_kwh=2.0))
    cny = plan_portfolio(write_portfolio(folder, currency="CNY", jobs=jobs, owned=owned, electricity_per_kwh=2.0))
    assert [j["where"] for j in usd.jobs] == ["rented"]
    assert [j["where"] for j in cny.jobs] == ["owned"]
    hours = cny.jobs[0]["end_hours"] - cny.jobs[0]["start_hours"]
    assert cny.cost["total"] == pytest.approx(hours * 0.45 * 2.0, abs=0.011)
    assert usd.cost["total"] == pytest.approx(usd.rentals[0]["units"]["second"] * 3.0 / 3600 / USD_CNY, abs=0.011)

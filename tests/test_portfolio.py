"""ftopt portfolio: never worse than renting each job alone, valid schedules, costs from their parts, break-even.

The portfolios here use a made-up CNY catalog (a per-second RTX 4090 and an A100 with a month price) and the 8B
LoRA builder scenario, so that every figure the tests check can be recomputed from the files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from optimizer.portfolio.plan import plan_portfolio
from optimizer.portfolio.schedule import Occurrence, Problem, Rental, Run, solve
from optimizer.solve.planner import solve_scenario

from .conftest import REPO, scenario_doc

PRICES = {"t-4090": {"hour": 3.0}, "t-a100": {"hour": 6.0, "month": 2000.0}}
OFFERS = {
    "schema_version": 1,
    "currency": "CNY",
    "offers": [
        {"id": "t-4090", "provider": "Test", "gpu": "RTX-4090", "cards_per_node": 8, "hour_increment_s": 1,
         "prices": {"hour": {"amount": 3.0, "source": "test fixture", "as_of": "2026-11-30"}}},
        {"id": "t-a100", "provider": "Test", "gpu": "A100-80G", "cards_per_node": 8,
         "prices": {"hour": {"amount": 6.0, "source": "test fixture", "as_of": "2026-11-30"},
                    "month": {"amount": 2000.0, "source": "test fixture", "as_of": "2026-11-30"}}},
    ],
}  # fmt: skip
UNIT_HOURS = {"month": 720, "week": 168, "day": 24, "hour": 1, "minute": 1 / 60, "second": 1 / 3600}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "offers.yaml").write_text(yaml.safe_dump(OFFERS, sort_keys=False))
    small = scenario_doc(catalog="offers.yaml")
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(small, sort_keys=False))
    big = scenario_doc(catalog="offers.yaml", data={"tokens": 6.0e7, "epochs": 1})
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(big, sort_keys=False))
    return tmp_path


def write_portfolio(folder: Path, **changes) -> Path:
    doc = {
        "name": "test-team",
        "currency": "CNY",
        "horizon_days": 30,
        "jobs": [
            {"name": "small", "scenario": "small.yaml", "release_day": 0, "due_day": 5,
             "repeat": {"every_days": 10, "count": 3}},
            {"name": "big", "scenario": "big.yaml", "release_day": 2, "due_day": 20},
        ],
        "catalog": "offers.yaml",
    }  # fmt: skip
    doc.update(changes)
    path = folder / "portfolio.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _solo_total(folder: Path) -> float:
    """Sum over occurrences of `ftopt solve`'s cost for the job alone (cheapest rental, no limits)."""
    small = solve_scenario(folder / "small.yaml").best.cost.total
    big = solve_scenario(folder / "big.yaml").best.cost.total
    return 3 * small + big


# ------------------------------------------------------------------------------------------------ cost


def test_never_worse_than_renting_each_occurrence_alone(folder: Path):
    result = plan_portfolio(write_portfolio(folder))
    assert result.status == "optimal"
    assert result.cost["total"] <= _solo_total(folder) + 0.01 * len(result.jobs)


def test_an_owned_card_makes_the_portfolio_strictly_cheaper(folder: Path):
    owned = [{"gpu": "RTX-4090", "cards": 1, "power_w": 450}]
    result = plan_portfolio(write_portfolio(folder, owned=owned, electricity_per_kwh=0.8))
    assert result.cost["total"] < _solo_total(folder) - 1.0
    assert any(j["where"] == "owned" for j in result.jobs)


def test_sharing_a_month_rental_is_strictly_cheaper_than_two_solo_rentals():
    # two 100-hour jobs on one card: alone each pays min(100 x 3, 400) = 300; one month block carries both for 400
    rental = Rental("a", "A100-80G", {"hour": 3.0, "month": 400.0}, 3600, (1,))
    run = Run("rent", 0, 1, 100, 100.0, 300.0, 0)
    occurrences = (Occurrence(0, 0, 0, 300, (run,)), Occurrence(1, 0, 0, 300, (run,)))
    schedule = solve(Problem(3600, 720, occurrences, (), (rental,)))
    assert schedule.objective == pytest.approx(400.0)
    assert [b.members for b in schedule.blocks] == [(0, 1)]
    assert schedule.blocks[0].units == {"month": 1}


# ------------------------------------------------------------------------------------------------ validity


@pytest.fixture
def mixed(folder: Path):
    """Owned and buyable 4090s, rentals with a month price: every kind of placement is available."""
    owned = [{"gpu": "RTX-4090", "cards": 1, "power_w": 450}]
    buy = [{"gpu": "RTX-4090", "price": 3000, "life_years": 3, "resale_fraction": 0.2, "power_w": 450,
            "max_cards": 2}]  # fmt: skip
    path = write_portfolio(folder, owned=owned, buy=buy, electricity_per_kwh=0.8)
    return yaml.safe_load(path.read_text()), plan_portfolio(path)


def test_every_occurrence_runs_inside_its_release_and_due_days(mixed):
    doc, result = mixed
    jobs = {j["name"]: j for j in doc["jobs"]}
    for occ in result.jobs:
        spec = jobs[occ["name"]]
        shift = occ["occurrence"] * spec.get("repeat", {}).get("every_days", 0)
        assert occ["start_hours"] >= (spec["release_day"] + shift) * 24 - 1e-6
        assert occ["end_hours"] <= (spec["due_day"] + shift) * 24 + 1e-6


def test_owned_and_bought_cards_are_never_over_committed(mixed):
    doc, result = mixed
    capacity = {"owned": doc["owned"][0]["cards"], "bought": sum(p["cards"] for p in result.purchases)}
    for where, cards in capacity.items():
        runs = [j for j in result.jobs if j["where"] == where]
        for probe in runs:  # the use is highest at some run's start
            t = probe["start_hours"]
            assert sum(j["cards"] for j in runs if j["start_hours"] <= t < j["end_hours"]) <= cards


def test_every_rented_occurrence_is_inside_a_rental_of_its_offer_with_enough_cards(mixed):
    _, result = mixed
    for occ in (j for j in result.jobs if j["where"] == "rented"):
        label = f"{occ['name']}#{occ['occurrence']}"
        holders = [r for r in result.rentals if label in r["jobs"]]
        assert len(holders) == 1
        r = holders[0]
        assert (r["offer"], r["cards"] >= occ["cards"]) == (occ["offer"], True)
        assert r["start_hours"] - 1e-6 <= occ["start_hours"] and occ["end_hours"] <= r["end_hours"] + 1e-6
        billed = sum(n * UNIT_HOURS[t] for t, n in r["units"].items())
        assert billed >= r["end_hours"] - r["start_hours"] - 1e-6


def test_costs_add_up_from_the_parts(mixed):
    doc, result = mixed
    rent = sum(r["cards"] * n * (PRICES[r["offer"]][t] if t in PRICES[r["offer"]] else
                                 PRICES[r["offer"]]["hour"] * UNIT_HOURS[t])
               for r in result.rentals for t, n in r["units"].items())  # fmt: skip
    opt = doc["buy"][0]
    capital = (
        sum(p["cards"] for p in result.purchases)
        * opt["price"]
        * (1 - opt["resale_fraction"])
        * 30
        / (365 * opt["life_years"])
    )
    local = [j for j in result.jobs if j["where"] in ("owned", "bought")]
    power = sum(j["cards"] * (j["end_hours"] - j["start_hours"]) * 450 / 1000 * 0.8 for j in local)
    c = result.cost
    assert (c["rent"], c["capital"], c["power"]) == (pytest.approx(rent, abs=0.01), pytest.approx(capital, abs=0.01),
                                                     pytest.approx(power, abs=0.01))  # fmt: skip
    assert c["total"] == pytest.approx(c["rent"] + c["capital"] + c["power"], abs=0.011)


# ------------------------------------------------------------------------------------------------ buy or rent


def _weekly(folder: Path, price: float) -> Path:
    """A job every week of a 28-day horizon, only on one RTX 4090: rented per second at 3 CNY/h, or bought."""
    (folder / "one.yaml").write_text(yaml.safe_dump(scenario_doc(
        catalog="offers.yaml", allow={"gpus": ["RTX-4090"], "max_cards": 1}), sort_keys=False))  # fmt: skip
    jobs = [{"name": "weekly", "scenario": "one.yaml", "release_day": 0, "due_day": 7,
             "repeat": {"every_days": 7, "count": 4}}]  # fmt: skip
    buy = [{"gpu": "RTX-4090", "price": price, "life_years": 2, "resale_fraction": 0.25, "power_w": 450,
            "max_cards": 1}]  # fmt: skip
    return write_portfolio(folder, horizon_days=28, jobs=jobs, buy=buy, electricity_per_kwh=0.8)


def test_the_buy_decision_flips_at_the_reported_break_even(folder: Path):
    probe = plan_portfolio(_weekly(folder, 1000.0))
    demand = sum(j["end_hours"] - j["start_hours"] for j in probe.jobs) / 4  # hours per week
    reported = probe.break_even[0]["hours_per_week"]
    # scale the price so that the break-even sits 5% above, then 5% below, the team's weekly demand
    above = plan_portfolio(_weekly(folder, 1000.0 * demand * 1.05 / reported))
    below = plan_portfolio(_weekly(folder, 1000.0 * demand * 0.95 / reported))
    assert above.break_even[0]["hours_per_week"] == pytest.approx(demand * 1.05, rel=1e-3)
    assert (above.purchases, {j["where"] for j in above.jobs}) == ([], {"rented"})
    assert ([p["cards"] for p in below.purchases], {j["where"] for j in below.jobs}) == ([1], {"bought"})


# ------------------------------------------------------------------------------------------------ command line


def test_json_has_the_contract_keys(folder: Path, run_cli):
    res = run_cli("portfolio", write_portfolio(folder), "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {"status", "cost", "purchases", "jobs", "rentals", "break_even"} <= set(doc)
    assert set(doc["cost"]) == {"total", "currency", "rent", "capital", "power"}
    assert set(doc["jobs"][0]) == {"name", "occurrence", "start_hours", "end_hours", "gpu", "cards", "where",
                                   "offer", "plan"}  # fmt: skip
    assert set(doc["rentals"][0]) == {"offer", "cards", "term", "units", "start_hours", "end_hours", "jobs"}
    assert sorted((j["name"], j["occurrence"]) for j in doc["jobs"]) == [("big", 0), ("small", 0), ("small", 1),
                                                                           ("small", 2)]  # fmt: skip


def test_plot_writes_a_png(folder: Path, run_cli, tmp_path: Path):
    out = tmp_path / "schedule.png"
    res = run_cli("portfolio", write_portfolio(folder), "--plot", out)
    assert res.exit_code == 0, res.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"horizon_days": 20}, r"portfolio\.yaml: jobs\[0\]: occurrence 2 of 'small' is due on day 25, after "),
        ({"jobs": [{"name": "x", "scenario": "small.yaml", "release_day": 3, "due_day": 2}]},
         r"portfolio\.yaml: jobs\[0\]: due_day \(2\) must be after release_day \(3\)"),
        ({"jobs": [{"name": "x", "scenario": "nope.yaml", "release_day": 0, "due_day": 2}]},
         r"portfolio\.yaml: jobs\[0\]\.scenario: scenario file 'nope\.yaml' not found"),
        ({"owned": [{"gpu": "RTX-4909", "cards": 1, "power_w": 450}], "electricity_per_kwh": 1},
         r"portfolio\.yaml: owned\[0\]\.gpu: unknown GPU 'RTX-4909', did you mean"),
        ({"owned": [{"gpu": "RTX-4090", "cards": 1, "power_w": 450}]},
         r"portfolio\.yaml: electricity_per_kwh is required when owned or buy cards are listed"),
        ({"horizon": 30}, r"portfolio\.yaml: horizon: unknown key"),
    ],
)  # fmt: skip
def test_bad_portfolios_are_one_line_errors_with_exit_2(folder: Path, run_cli, change, pattern):
    res = run_cli("portfolio", write_portfolio(folder, **change))
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert "\n" not in line and line.startswith("ftopt: error: ")
    assert __import__("re").search(pattern, line), line


def test_the_shipped_example_validates_and_names_existing_scenarios():
    from optimizer.portfolio.plan import load_portfolio

    path = REPO / "portfolios" / "team-q1.yaml"
    pf = load_portfolio(path)
    assert all((path.parent / j.scenario).is_file() for j in pf.jobs)


def test_an_occurrence_that_fits_nowhere_in_its_window_makes_the_portfolio_infeasible(folder: Path, run_cli):
    jobs = [{"name": "rushed", "scenario": "big.yaml", "release_day": 0, "due_day": 0.001}]
    res = run_cli("portfolio", write_portfolio(folder, jobs=jobs), "--json")
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["status"], doc["jobs"]) == (1, "infeasible", [])  # an answer without a plan: exit 1
    # the window binds, not memory: the message leads with it and the fastest plan's hours (as solve's deadline does)
    assert doc["message"].startswith("rushed#0: window too short: the fastest plan takes "), doc["message"]
    fastest, window = re.search(r"takes ([\d.,]+) h .* release to due is ([\d.,]+) h", doc["message"]).groups()
    assert (float(window), "memory" in doc["message"]) == (0.02, False) and float(fastest) > float(window)
    text = run_cli("portfolio", folder / "portfolio.yaml").stdout
    assert "Cost: no plan\n" in text and "Cost: -" not in text  # no dashes for a cost that does not exist
    page = folder / "p.html"
    run_cli("portfolio", folder / "portfolio.yaml", "--html", page)  # its header had said "0 job occurrences"
    assert "ftopt portfolio: no schedule over " in page.read_text() and "0 job occurrences" not in page.read_text()


@pytest.mark.parametrize("as_json", [False, True])
def test_a_job_that_fits_no_card_exits_1_in_text_and_json(folder: Path, run_cli, as_json: bool):
    # a million-token sequence of an 8B LoRA: ftopt solve answers infeasible (nothing fits in memory), not bad input
    (folder / "long.yaml").write_text(yaml.safe_dump(scenario_doc(catalog="offers.yaml", seq_len=1_000_000)))
    jobs = [{"name": "small", "scenario": "small.yaml", "release_day": 0, "due_day": 5},
            {"name": "long", "scenario": "long.yaml", "release_day": 0, "due_day": 20}]  # fmt: skip
    res = run_cli("portfolio", write_portfolio(folder, jobs=jobs), *(["--json"] if as_json else []))
    assert res.exit_code == 1, res.stderr
    assert "long#0: no plan fits in memory" in (json.loads(res.stdout)["message"] if as_json else res.stdout)


def test_a_feasible_portfolio_exits_0(folder: Path, run_cli):
    res = run_cli("portfolio", write_portfolio(folder))
    assert res.exit_code == 0, res.stderr
    assert "test-team: optimal" in res.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_a_job_scenario_whose_pins_admit_nothing_is_its_own_one_line_error(folder: Path, run_cli, as_json: bool):
    # tp must divide the heads (32) and kv_heads (8) of Llama-3.1-8B: the scenario is bad input, not an infeasible job
    (folder / "tp3.yaml").write_text(yaml.safe_dump(scenario_doc(catalog="offers.yaml", plan={"tp": 3})))
    alone = run_cli("solve", folder / "tp3.yaml")
    jobs = [{"name": "small", "scenario": "small.yaml", "release_day": 0, "due_day": 5},
            {"name": "odd", "scenario": "tp3.yaml", "release_day": 0, "due_day": 20}]  # fmt: skip
    res = run_cli("portfolio", write_portfolio(folder, jobs=jobs), *(["--json"] if as_json else []))
    assert (res.exit_code, res.stdout) == (2, "")
    line = res.stderr.strip()
    assert "\n" not in line
    assert line == (f"ftopt: error: {folder / 'tp3.yaml'}: plan.tp: tp=3 must divide the attention heads (32) and "
                    "kv_heads (8) of Llama-3.1-8B; allowed: 1, 2, 4, 8")  # fmt: skip
    assert (alone.exit_code, alone.stderr.strip()) == (2, line)  # the same line ftopt solve gives the scenario


def test_offers_in_another_currency_need_an_exchange_rate(folder: Path, run_cli):
    res = run_cli("portfolio", write_portfolio(folder, currency="XYZ"))
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "ftopt: error: " + str(folder / "portfolio.yaml") + ": currency: no exchange rate "
        "CNY->XYZ in catalogs/fx.yaml for the CNY offers; add one or use a CNY portfolio"
    )


def test_the_same_portfolio_gives_byte_identical_json(folder: Path, run_cli):
    path = write_portfolio(folder, owned=[{"gpu": "RTX-4090", "cards": 1, "power_w": 450}], electricity_per_kwh=0.8)
    first, second = run_cli("portfolio", path, "--json"), run_cli("portfolio", path, "--json")
    assert first.exit_code == 0 and first.stdout == second.stdout


def test_portfolio_help_states_the_exit_rule(run_cli):
    text = " ".join(run_cli("portfolio", "--help").stdout.split())
    assert "1 some job occurrence has no plan: status infeasible (text and --json alike)" in text
    assert "2 bad input, in the portfolio or in a job's scenario" in text


def test_the_jobs_table_shows_offload_when_a_plan_needs_it(run_cli):
    # team-q1's 70B job offloads its optimizer states (~1.6 TB of host RAM): the plan column once left that out
    path = REPO / "portfolios" / "team-q1.yaml"
    doc = json.loads(run_cli("portfolio", path, "--json").stdout)
    res = run_cli("portfolio", path)
    assert res.exit_code == 0, res.stderr
    table = " ".join(res.stdout.replace("│", " ").split())
    offloads = {j["plan"]["offload"] for j in doc["jobs"]}
    assert offloads - {"none"}, "team-q1 no longer has an offloading job: pick another example"
    assert table.count("offload=") == sum(j["plan"]["offload"] != "none" for j in doc["jobs"])
    for off in offloads - {"none"}:
        assert f"offload={off}" in table
    from optimizer.report.portfolio import plan_text

    plan = {"tp": 2, "pp": 2, "dp": 2, "zero_stage": 1, "offload": "none", "micro_batch": 4, "checkpointing": "none"}
    assert plan_text(plan) == "tp2 pp2 dp2 Z1 mb4 ck=none"
    assert plan_text({**plan, "pp": 1, "offload": "optimizer"}) == "tp2 dp2 Z1 offload=optimizer mb4 ck=none"


def test_a_window_that_binds_says_the_host_ram_shortfall_is_of_other_configurations(tmp_path: Path, run_cli):
    # team-q1 with release-70b due 2.4 h after its release: the window binds, and the host RAM clause read as if no
    # configuration had enough RAM although this job has plans; it now says "other" and names the closest, as solve
    doc = yaml.safe_load((REPO / "portfolios" / "team-q1.yaml").read_text())
    for job in doc["jobs"]:
        job["scenario"] = str((REPO / "portfolios" / job["scenario"]).resolve())
        if job["name"] == "release-70b":
            job["due_day"] = job["release_day"] + 0.1
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    message = json.loads(run_cli("portfolio", path, "--json").stdout)["message"]
    assert message.startswith("release-70b#0: window too short: the fastest plan takes ")
    assert "; other configurations, which fit their cards, need more host RAM than their nodes have (the closest: " \
        in message

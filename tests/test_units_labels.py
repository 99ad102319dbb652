"""Units and labels a new user reads: currencies named, billing basis in words, NVLink as the plan gets it, modes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from optimizer.inputs.atomic import write_atomic
from optimizer.report.plan import billing_basis


def test_a_cost_in_another_currency_names_the_budget_currency(run_cli, write_scenario):
    path = write_scenario(budget={"amount": 100000, "currency": "CNY"}, catalog="us")
    out = " ".join(run_cli("solve", path).stdout.split())
    assert " CNY)" in out and "in budget currency" not in out
    doc = json.loads(run_cli("solve", path, "--json").stdout)
    assert doc["cost"]["currency"] == "USD" and doc["cost"]["budget_currency"] == "CNY"


def test_billing_basis_says_what_second_and_mixed_terms_mean():
    assert billing_basis("second") == "hourly price billed per second"
    assert billing_basis("month+hour") == "monthly price + hourly price"


def test_catalog_list_ranks_and_shows_the_cheapest_card_hour_in_one_currency(run_cli):
    rows = json.loads(run_cli("catalog", "list", "--json").stdout)
    rtx3090 = next(r for r in rows if r["gpu"] == "RTX-3090")
    assert rtx3090["currency"] == "CNY" and 0 < rtx3090["cheapest_hourly_usd"] < rtx3090["cheapest_hourly"]
    text = run_cli("catalog", "list").stdout
    assert "(USD)" in text


def test_an_offer_of_a_gpu_without_nvlink_does_not_claim_it(run_cli):
    text = run_cli("catalog", "show", "gpuindex-rtx-4090").stdout
    assert "nvlink: True" not in text and "nvlink: no" in text
    assert json.loads(run_cli("catalog", "show", "gpuindex-rtx-4090", "--json").stdout)["nvlink"] is False


def test_written_files_follow_the_umask(tmp_path: Path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.txt", "x")
        os.umask(0o077)
        write_atomic(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o600


def test_the_plan_says_where_to_rent_and_on_what_price_basis(run_cli):
    from .conftest import seventy_b

    doc = json.loads(run_cli("solve", seventy_b(), "--json").stdout)
    offer = doc["offer"]
    assert offer["id"] == doc["plan"]["offer"] and offer["provider"]
    assert all(p["source"] and p["as_of"] for p in offer["prices"].values())
    text = " ".join(run_cli("solve", seventy_b()).stdout.split())
    assert f"Rent: {offer['id']} from {offer['provider']}" in text
    if offer["id"] == "seed002-a100-80g":  # priced at the low end of a quoted range: the plan must say so
        assert "the low end is used" in text


def test_checklist_figures_are_written_out_not_in_exponent_notation():
    from optimizer.report.offer import figure

    assert figure(1_360_560.0) == "1,360,560"  # the memory check of a big card in MiB ('{:,g}' gave 1.36056e+06)
    assert figure(25.6) == "25.6" and figure(3350.0) == "3,350"

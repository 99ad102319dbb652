"""Offers sold as whole instances: plans rent whole machines, bill instances x instance price, and say so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.solve.planner import prepare, solve_scenario
from optimizer.solve.space import card_counts
from optimizer.solve.validator import check_plan

from .conftest import scenario_doc
from .test_offers_hosts import SRC, offer, write, write_offers


@pytest.mark.parametrize(("catalog", "gpu", "offer_id", "instance_price"), [
    ("gcp", "B200", "gcp-a4-highgpu-8g-us-central1", 90.216),  # SkyPilot gcp.csv: the VM costs 90.216 USD/h
    ("us", "H100-SXM", "aws-p5-h100", 55.04),  # p5.48xlarge: 55.04 USD/h for 8 GPUs
])
def test_an_instance_offer_bills_whole_instances(tmp_path, catalog, gpu, offer_id, instance_price):
    # a small LoRA job that one card runs: before, the plan rented (and billed) 1 card of the 8-GPU machine
    doc = scenario_doc(catalog=catalog, allow={"gpus": [gpu]}, plan={"offer": offer_id})
    best = solve_scenario(write(tmp_path, doc)).best
    assert best.plan is not None and best.cost is not None and best.offer is not None
    assert best.plan.cards % 8 == 0  # never a fraction of the 8-GPU machine
    assert best.offer.sold_as == "instance" and best.offer.cards_per_instance == 8
    instances = best.plan.cards // 8
    units = best.plan.billed_units
    hours = sum(n * {"second": 1 / 3600, "minute": 1 / 60, "hour": 1}[u] for u, n in units.items())
    # the provider's bill: instances x instance price x billed hours (to the cent)
    assert best.cost.total == pytest.approx(instances * instance_price * hours, abs=0.01)
    sc, cat, _ = prepare(tmp_path / "scenario.yaml")
    assert check_plan(sc, cat, best) == []


def test_card_counts_of_an_instance_offer_are_whole_instances(catalog):
    p5 = next(o for o in catalog.offers if o.id == "aws-p5-h100")  # 8 cards, up to 16 nodes, whole instances
    assert card_counts(p5, None) == [8, 16, 32, 64, 128]
    per_card = p5.model_copy(update={"sold_as": "card", "cards_per_instance": None})
    assert card_counts(per_card, None)[:4] == [1, 2, 4, 8]


def test_plan_text_names_the_instances(tmp_path, run_cli):
    path = write(tmp_path, scenario_doc(catalog="gcp", allow={"gpus": ["B200"]}))
    result = run_cli("solve", path)
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "1 x (8 x B200) instance " in text
    assert "= 1 whole instance of 8 cards at 90.22 USD per instance-hour" in text


def test_a_pinned_card_count_that_splits_an_instance_is_refused(tmp_path, run_cli):
    doc = scenario_doc(catalog="gcp", allow={"gpus": ["B200"]}, plan={"offer": "gcp-a4-highgpu-8g-us-central1",
                                                                    "cards": 4})  # fmt: skip
    result = run_cli("solve", write(tmp_path, doc))
    assert result.exit_code == 2
    assert "plan.cards" in result.stderr and "whole instances of 8" in result.stderr


def test_the_validator_rejects_part_of_an_instance(tmp_path):
    path = write(tmp_path, scenario_doc(catalog="gcp", allow={"gpus": ["B200"]}))
    best = solve_scenario(path).best
    assert best.plan is not None
    half = best.model_copy(update={"plan": best.plan.model_copy(update={"cards": 4, "dp": 4})})
    sc, cat, _ = prepare(path)
    found = check_plan(sc, cat, half)
    assert any("not a whole number of gcp-a4-highgpu-8g-us-central1's 8-card instances" in v for v in found), found


@pytest.mark.parametrize(("extra", "message"), [
    ({"sold_as": "rack"}, "sold_as"),
    ({"cards_per_instance": 8}, "cards_per_instance is for sold_as: instance"),
    ({"sold_as": "instance", "cards_per_instance": 4}, "must equal cards_per_node (8)"),
])
def test_catalog_validate_checks_how_an_offer_is_sold(tmp_path, run_cli, extra, message):
    path = write_offers(tmp_path, [offer("bad-sold", "A100-80G", 1.0, **extra)])
    result = run_cli("catalog", "validate", path)
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_every_multi_gpu_row_of_the_imported_catalogs_is_an_instance():
    for name in ("aws", "gcp", "lambda", "runpod", "vast"):
        for o in load_catalog([Path(f"catalogs/offers/{name}.yaml").resolve()]).offers:
            assert (o.sold_as == "instance") == (o.cards_per_node > 1), o.id


def test_portfolio_rents_whole_instances(tmp_path):
    # a portfolio job on an instance offer only: its rental runs take whole 8-card machines
    from optimizer.portfolio.plan import build_problem

    offers = write_offers(tmp_path, [offer("inst-a100", "A100-80G", 1.0, sold_as="instance",
                                           host={"ram_gib": 1024, **SRC})])  # fmt: skip
    job = write(tmp_path, scenario_doc(catalog=str(offers)), "job.yaml")
    pf = tmp_path / "pf.yaml"
    pf.write_text(yaml.safe_dump({"currency": "USD", "horizon_days": 10, "catalog": str(offers),
                                  "jobs": [{"name": "j", "scenario": str(job), "release_day": 0, "due_day": 5}]}))
    _, _, problem, _, _ = build_problem(pf)
    cards = sorted({r.cards for occ in problem.occurrences for r in occ.runs if r.kind == "rent"})
    assert cards and all(c % 8 == 0 for c in cards), cards

"""Every single change that restores a plan is listed with its value, and applying it does restore one."""

from __future__ import annotations

import math

import yaml

from optimizer.inputs.schema import Status
from optimizer.solve.planner import Overrides, solve_scenario

from .conftest import REPO

SMALL = {"gpus": ["A100-80G", "H100-SXM"]}


def _options(result) -> dict:
    return {o.field: o.value for o in result.relaxation.options}


def test_70b_with_a_host_ram_cap_names_raising_the_cap_with_the_ram_needed(tmp_path):
    doc = yaml.safe_load((REPO / "scenarios/70b.yaml").read_text())
    doc["allow"]["max_host_memory_gib"] = 1000
    doc["catalog"] = "cn"  # single-node offers: 70B full fine-tuning there must offload
    doc["risk"] = "p50"  # at the median error an MI300X plan needs no offload (at p90 none does: no GPU option)
    path = tmp_path / "70b-host.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = solve_scenario(path)
    assert result.best.status is Status.infeasible
    options = _options(result)
    need = options["allow.max_host_memory_gib"]
    assert need > 1000
    assert f"raise allow.max_host_memory_gib to {need:,}" in result.relaxation.message
    assert options["allow.gpus"] == ["MI300X"]
    doc["allow"]["max_host_memory_gib"] = need
    path.write_text(yaml.safe_dump(doc))
    fixed = solve_scenario(path)
    assert fixed.best.status is Status.optimal and fixed.best.memory.cpu_offload <= need * 2**30


def test_each_listed_limit_applied_alone_restores_a_plan(write_scenario):
    path = write_scenario(allow={**SMALL, "max_cards": 1}, budget={"amount": 0.01, "currency": "USD"})
    result = solve_scenario(path)
    options = _options(result)
    assert "budget.amount" in options
    fixed = solve_scenario(path, Overrides(budget=options["budget.amount"]))
    assert fixed.best.status is Status.optimal
    if "allow.max_cards" in options:
        doc = yaml.safe_load(path.read_text())
        doc["allow"]["max_cards"] = options["allow.max_cards"]
        path.write_text(yaml.safe_dump(doc))
        assert solve_scenario(path).best.status is Status.optimal


def test_max_cards_value_is_the_smallest_that_works(write_scenario):
    """A deadline only many cards can meet: raising max_cards to the listed value works, one less does not."""
    fastest = solve_scenario(write_scenario("f.yaml", allow=SMALL, objective="time")).best
    path = write_scenario("s.yaml", allow={**SMALL, "max_cards": 1}, deadline_hours=round(fastest.time.hours * 1.5, 2))
    result = solve_scenario(path)
    assert result.best.status is Status.infeasible  # the fastest plan needs far more than one card
    cards = _options(result)["allow.max_cards"]
    doc = yaml.safe_load(path.read_text())
    doc["allow"]["max_cards"] = cards
    path.write_text(yaml.safe_dump(doc))
    assert solve_scenario(path).best.status is Status.optimal
    doc["allow"]["max_cards"] = cards - 1
    path.write_text(yaml.safe_dump(doc))
    assert cards == 1 or solve_scenario(path).best.status is Status.infeasible


def test_budget_and_deadline_both_too_tight_show_the_front_between_them(write_scenario):
    path = write_scenario(allow=SMALL, budget={"amount": 0.01, "currency": "USD"}, deadline_hours=0.001)
    rel = solve_scenario(path).relaxation
    assert len(rel.tradeoff) >= 2
    costs, hours = [c for c, _ in rel.tradeoff], [h for _, h in rel.tradeoff]
    assert costs == sorted(costs) and hours == sorted(hours, reverse=True)
    assert "trade one against the other" in rel.message
    for cost, h in (rel.tradeoff[0], rel.tradeoff[-1]):  # both ends of the front are budget/deadline pairs that work
        assert solve_scenario(path, Overrides(budget=cost, deadline_hours=h)).best.status is Status.optimal


def test_deadline_value_is_the_fastest_plans_time_and_no_less_works(write_scenario):
    """A deadline half the fastest plan's time: the listed deadline_hours is that plan's time rounded up to 1/100 h
    (not the cheapest plan's, which is slower), it restores a plan, and 0.01 h less does not."""
    fastest = solve_scenario(write_scenario("f.yaml", allow=SMALL, objective="time")).best
    cheapest = solve_scenario(write_scenario("c.yaml", allow=SMALL)).best
    assert cheapest.time.hours > fastest.time.hours + 0.05  # the two plans differ, so the value tells them apart
    path = write_scenario("s.yaml", allow=SMALL, deadline_hours=round(fastest.time.hours / 2, 2))
    result = solve_scenario(path)
    assert result.best.status is Status.infeasible
    need = _options(result)["deadline_hours"]
    assert need == math.ceil(round(fastest.time.hours * 100, 6)) / 100
    assert solve_scenario(path, Overrides(deadline_hours=need)).best.status is Status.optimal
    assert solve_scenario(path, Overrides(deadline_hours=need - 0.01)).best.status is Status.infeasible


def test_long_context_that_fits_no_offered_card_names_the_fused_loss_first(tmp_path):
    # 8B full fine-tuning at 32K tokens under FSDP on the aws catalog: the fp32 logits of the 128K vocabulary are the
    # largest item on the card, and the explanation named only bigger GPUs. Liger's fused loss (training.loss: fused)
    # alone gives a plan, and applying it does.
    doc = {"name": "s03", "model": "Llama-3.1-8B", "method": "full", "data": {"tokens": 3.0e8, "epochs": 1},
           "seq_len": 32768, "global_batch": 16, "training": {"framework": "hf", "sharding": "fsdp"},
           "deadline_hours": 48, "catalog": "aws"}  # fmt: skip
    path = tmp_path / "s03.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = solve_scenario(path)
    assert result.best.status is Status.infeasible
    assert _options(result)["training.loss"] == "fused"
    assert "set training.loss: fused" in result.relaxation.message
    doc["training"]["loss"] = "fused"
    path.write_text(yaml.safe_dump(doc))
    assert solve_scenario(path).best.status is Status.optimal

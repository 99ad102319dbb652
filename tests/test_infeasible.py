"""Infeasible scenarios say which constraint binds and give a relaxation that, applied, makes them feasible.

Every relaxation is checked by re-solving the scenario with it applied (and, for budget and deadline, by checking
that one cent or 0.01 h less is still infeasible, so the figure is the smallest).
"""

from __future__ import annotations

import json

import pytest

from optimizer.inputs.schema import Objective, Status
from optimizer.solve.planner import Overrides, solve_scenario

SMALL = {"gpus": ["A100-80G", "H100-SXM"]}  # two GPU types keep every solve fast and leave a cost/time trade-off


def _in_budget_currency(est) -> float:
    """The plan's cost in the budget's currency (offers may be priced in another one)."""
    return est.cost.budget_currency_total if est.cost.budget_currency_total is not None else est.cost.total


def _with(path, **overrides):
    """Re-solve a scenario file with command-line overrides (--budget, --deadline-hours)."""
    return solve_scenario(path, Overrides(**overrides))


@pytest.fixture
def solve_doc(write_scenario):
    """Write a scenario (BASE_SCENARIO with changes; allow = SMALL unless given) and solve it: (path, result)."""
    count = iter(range(100))

    def _run(**changes):
        path = write_scenario(f"s{next(count)}.yaml", allow=changes.pop("allow", SMALL), **changes)
        return path, solve_scenario(path)

    return _run


# ------------------------------------------------------------------------------------------------ budget


def test_budget_too_small_binds_the_budget(solve_doc):
    _, result = solve_doc(budget={"amount": 0.01, "currency": "USD"})
    assert result.best.status is Status.infeasible
    assert result.relaxation.binding == ["budget.amount"]


def test_budget_needed_applied_makes_the_scenario_feasible(solve_doc):
    path, result = solve_doc(budget={"amount": 0.01, "currency": "USD"})
    fixed = _with(path, budget=result.relaxation.budget_needed)
    assert fixed.best.status is Status.optimal
    assert _in_budget_currency(fixed.best) <= result.relaxation.budget_needed


def test_budget_needed_is_the_smallest_budget_that_works(solve_doc):
    path, result = solve_doc(budget={"amount": 0.01, "currency": "USD"})
    less = _with(path, budget=round(result.relaxation.budget_needed - 0.01, 2))
    assert less.best.status is Status.infeasible


def test_budget_message_states_the_figure_and_currency(solve_doc):
    rel = solve_doc(budget={"amount": 0.01, "currency": "USD"})[1].relaxation
    assert f"costs {rel.budget_needed:,.2f} USD (budget 0.01 USD)" in rel.message


# ------------------------------------------------------------------------------------------------ deadline


def test_deadline_too_short_binds_the_deadline(solve_doc):
    _, result = solve_doc(deadline_hours=0.01)
    assert result.relaxation.binding == ["deadline_hours"]
    assert result.relaxation.deadline_needed_hours > 0.01


def test_deadline_needed_applied_makes_the_scenario_feasible(solve_doc):
    path, result = solve_doc(deadline_hours=0.01)
    fixed = _with(path, deadline_hours=result.relaxation.deadline_needed_hours)
    assert fixed.best.status is Status.optimal
    assert fixed.best.time.hours <= result.relaxation.deadline_needed_hours


def test_deadline_needed_is_the_shortest_deadline_that_works(solve_doc):
    path, result = solve_doc(deadline_hours=0.01)
    less = _with(path, deadline_hours=round(result.relaxation.deadline_needed_hours - 0.01, 2))
    assert less.best.status is Status.infeasible


# ------------------------------------------------------------------------------------------------ both


@pytest.fixture
def trade_off(solve_doc):
    """Budget = the cheapest plan's cost, deadline = the fastest plan's time: each alone is met, not both."""
    cheapest = solve_doc(objective="cost")[1].best
    fastest = solve_doc(objective="time")[1].best
    low, high = _in_budget_currency(cheapest), _in_budget_currency(fastest)
    assert high > low + 0.01 and cheapest.time.hours > fastest.time.hours + 0.01
    path, result = solve_doc(budget={"amount": low + 0.01, "currency": "USD"},
                             deadline_hours=round(fastest.time.hours + 0.01, 2))  # fmt: skip
    assert result.best.status is Status.infeasible
    return path, result


def test_budget_and_deadline_binding_together_are_both_reported(trade_off):
    rel = trade_off[1].relaxation
    assert rel.binding == ["budget.amount", "deadline_hours"]
    assert "either change alone makes the scenario feasible" in rel.message


def test_joint_budget_needed_keeps_the_deadline_and_is_enough(trade_off):
    path, result = trade_off
    fixed = _with(path, budget=result.relaxation.budget_needed)
    assert fixed.best.status is Status.optimal
    assert fixed.best.time.hours <= result.scenario.deadline_hours


def test_joint_deadline_needed_keeps_the_budget_and_is_enough(trade_off):
    path, result = trade_off
    fixed = _with(path, deadline_hours=result.relaxation.deadline_needed_hours)
    assert fixed.best.status is Status.optimal
    assert _in_budget_currency(fixed.best) <= result.scenario.budget.amount


def test_budget_and_deadline_each_hopeless_give_a_pair_that_works_together(solve_doc):
    path, result = solve_doc(budget={"amount": 0.01, "currency": "USD"}, deadline_hours=0.001)
    rel = result.relaxation
    assert rel.binding == ["budget.amount", "deadline_hours"]
    fixed = _with(path, budget=rel.budget_needed, deadline_hours=rel.deadline_needed_hours)
    assert fixed.best.status is Status.optimal


# ------------------------------------------------------------------------------------------------ memory


@pytest.fixture
def too_big_for_a_4090(solve_doc):
    """Full fine-tuning of 8B on one card without ZeRO: about 16 bytes per parameter, over 120 GiB."""
    return solve_doc(method="full", lora=None, allow=None, plan={"gpu": "RTX-4090", "cards": 1, "zero_stage": 0})[1]


def test_model_too_big_for_the_card_binds_memory(too_big_for_a_4090):
    rel = too_big_for_a_4090.relaxation
    assert rel.binding == ["memory"]
    assert rel.memory_needed_bytes > 24 * 2**30
    assert rel.gpus_that_fit


def test_every_gpu_that_fits_makes_the_scenario_feasible(too_big_for_a_4090, write_scenario):
    for gpu in too_big_for_a_4090.relaxation.gpus_that_fit:
        path = write_scenario(method="full", lora=None, plan={"gpu": gpu, "cards": 1, "zero_stage": 0})
        assert solve_scenario(path).best.status is Status.optimal, gpu


def test_memory_needed_fits_every_gpu_that_fits(too_big_for_a_4090, catalog):
    rel = too_big_for_a_4090.relaxation
    for gpu in rel.gpus_that_fit:
        assert catalog.gpus[gpu].memory_gib * 2**30 * 0.95 >= rel.memory_needed_bytes


def test_model_too_big_for_every_card_says_no_gpu_fits(solve_doc):
    _, result = solve_doc(model="Llama-3.1-70B", method="full", lora=None, allow=None,
                          plan={"cards": 1, "zero_stage": 0})  # fmt: skip
    rel = result.relaxation
    assert rel.binding == ["memory"] and rel.gpus_that_fit == []
    assert rel.memory_needed_bytes > 192 * 2**30  # more than the largest card in the catalog (MI300X)
    assert "no GPU in the catalog fits" in rel.message


def test_gradients_held_through_accumulation_name_the_settings_that_give_a_plan(solve_doc, write_scenario):
    """HF FSDP holds unsharded gradients through accumulation (no_sync): a reduce every micro-batch, or DeepSpeed,
    each gives the plan the scenario as written cannot have, and the explanation says so; applying one does."""
    doc = {"model": "Qwen2.5-72B", "method": "full", "lora": None, "global_batch": 512, "catalog": "cn",
           "training": {"framework": "hf", "sharding": "fsdp"}, "allow": {"max_host_memory_gib": 2048},
           "data": {"tokens": 2.0e8}}  # fmt: skip
    _, result = solve_doc(**doc)
    rel = result.relaxation
    assert rel.binding == ["memory"] and "no GPU in the catalog fits" not in rel.message
    assert [(o.field, o.value) for o in rel.options] == [("training.reduce_every_micro_batch", True),
                                                         ("training.sharding", "deepspeed")]
    for o in rel.options:
        section, key = o.field.split(".")
        fixed = {**doc, section: {**doc[section], key: o.value}}
        assert solve_doc(**fixed)[1].relaxation is None, o.field


# gcp rents every card on one 8-GPU node at most: 70B full fine-tuning without offload fits no gcp offer, while
# us rents H100s and A100s up to 16 nodes, where it fits (A100-80G: not offered by gcp at all)
ONE_NODE = {"model": "Llama-3.1-70B", "method": "full", "lora": None, "catalog": "gcp", "seq_len": 4096,
            "global_batch": 128, "data": {"tokens": 2.0e8, "epochs": 3}, "plan": {"offload": "none"},
            "training": {"framework": "hf", "sharding": "deepspeed", "optimizer": "adamw", "attention": "flash"}}


def test_a_pinned_gpu_that_fits_on_more_nodes_names_the_catalogs_limit_not_the_pin(solve_doc):
    doc = {**ONE_NODE, "plan": {"offload": "none", "gpu": "H100-SXM"}}
    rel = solve_doc(allow=None, **doc)[1].relaxation
    assert rel.binding == ["memory"] and "H100-SXM" in rel.gpus_that_fit
    assert "allow.gpus to H100-SXM" not in rel.message and "to one of them" not in rel.message
    assert "H100-SXM fits only on 32 cards or more, and the scenario's catalog (gcp) rents it on at most 8 (1 node " \
           "of 8): built-in catalog us rents enough (use catalog: us or --add-catalog us)" in rel.message
    assert solve_doc(allow=None, **{**doc, "catalog": "us"})[1].relaxation is None


def test_a_gpu_that_fits_on_more_cards_than_allow_max_cards_says_to_raise_it(solve_doc):
    """Switching catalog alone would only meet the max_cards limit next: the advice names both."""
    rel = solve_doc(allow={"max_cards": 8}, **{**ONE_NODE, "plan": {"offload": "none", "gpu": "H100-SXM"}})[1]
    assert "(use catalog: us or --add-catalog us), and raise allow.max_cards to 32" in rel.relaxation.message


def test_the_largest_offered_card_is_one_the_allow_list_admits(solve_doc):
    rel = solve_doc(allow={"gpus": ["H100-SXM"]}, **ONE_NODE)[1].relaxation
    assert "the largest offered card (H100-SXM) has 76.0 GiB usable" in rel.message
    assert "(B200)" not in rel.message  # gcp offers B200, which the allow-list excludes


def test_a_gpu_that_fits_outside_the_catalog_is_named_with_the_catalogs_that_offer_it(solve_doc):
    path, result = solve_doc(allow=None, **ONE_NODE)
    rel = result.relaxation
    assert "A100-80G is not in the scenario's catalog (gcp): built-in catalog us offers it (use catalog: us or " \
           "--add-catalog us)" in rel.message
    assert "set plan.gpu" not in rel.message  # nothing pinned or left out of an allow-list
    listed = rel.message.split("GPUs that would fit (built-in offers): ")[1].split(";")[0]
    assert listed.split(", ") == rel.gpus_that_fit and "A100-80G" in rel.gpus_that_fit
    assert _with(path, add_catalog=["us"]).relaxation is None


# ------------------------------------------------------------------------------------------------ allow-lists


def test_gpu_allow_list_that_excludes_every_fitting_plan_names_gpus_that_would(solve_doc, write_scenario):
    pins = {"cards": 1, "zero_stage": 0}
    _, result = solve_doc(method="full", lora=None, allow={"gpus": ["RTX-4090"]}, plan=pins)
    rel = result.relaxation
    assert rel.binding == ["allow.gpus"] and rel.gpus_that_fit
    fixed = write_scenario(method="full", lora=None, allow={"gpus": rel.gpus_that_fit[:1]}, plan=pins)
    assert solve_scenario(fixed).best.status is Status.optimal


def test_gpu_allow_list_and_budget_binding_together_are_fixed_by_both_figures(solve_doc, write_scenario):
    pins = {"cards": 1, "zero_stage": 0}
    tight = {"amount": 0.01, "currency": "USD"}
    _, result = solve_doc(method="full", lora=None, allow={"gpus": ["RTX-4090"]}, plan=pins, budget=tight)
    rel = result.relaxation
    assert rel.binding == ["allow.gpus", "budget.amount"]
    assert "with allow.gpus relaxed, budget too small" in rel.message
    fixed = write_scenario(method="full", lora=None, allow={"gpus": rel.gpus_that_fit}, plan=pins,
                           budget={"amount": rel.budget_needed, "currency": "USD"})  # fmt: skip
    assert solve_scenario(fixed).best.status is Status.optimal


def test_a_provider_allow_list_without_the_allowed_gpu_is_reported(solve_doc):
    # Jarvislabs rents L4s only: allowing its L4 or another provider's A100 each restores a plan (an unknown
    # provider name is an input error: tests/test_pins_allow.py)
    _, result = solve_doc(allow={"gpus": ["A100-80G"], "providers": ["Jarvislabs"]})
    assert result.relaxation.binding == ["allow.gpus", "allow.providers"]


# ------------------------------------------------------------------------------------------------ JSON


def test_infeasible_solve_json_carries_the_explanation(run_cli, write_scenario):
    path = write_scenario(allow=SMALL, deadline_hours=0.01)
    result = run_cli("solve", path, "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["status"] == "infeasible" and doc["plan"] is None
    assert doc["explanation"]["binding"] == ["deadline_hours"]
    assert doc["explanation"]["deadline_needed_hours"] > 0.01
    assert doc["explanation"]["currency"] == "USD"


def test_objective_time_reports_the_same_deadline_needed(solve_doc):
    by_cost = solve_doc(deadline_hours=0.01)[1].relaxation
    by_time = solve_doc(deadline_hours=0.01, objective=Objective.time.value)[1].relaxation
    assert by_cost.deadline_needed_hours == by_time.deadline_needed_hours

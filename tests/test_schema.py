"""Schemas are strict: unknown keys are rejected with a suggestion, closed choices list values; data round-trips."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.inputs.catalog import load_catalog, load_scenario
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import PlanPins, Scenario, Term
from optimizer.inputs.schema_plan import Estimate
from optimizer.solve.validator import validate_catalog_files

from .conftest import REPO, scenario_doc

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


def _error(write_scenario, **changes) -> str:
    path = write_scenario(**changes)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    return str(info.value)


def test_unknown_top_level_key_is_rejected_with_the_nearest_name(write_scenario):
    doc = scenario_doc()
    doc["seqlen"] = 4096
    path = write_scenario(doc=doc)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert re.fullmatch(r".*scenario\.yaml: seqlen: unknown key, did you mean 'seq_len'\?; allowed keys: .*",
                        str(info.value))  # fmt: skip


def test_unknown_nested_key_is_rejected_with_its_path(write_scenario):
    message = _error(write_scenario, training={"optimiser": "adamw"})
    assert re.fullmatch(r".*scenario\.yaml: training\.optimiser: unknown key, did you mean 'optimizer'\?.*", message)


def test_unknown_plan_pin_is_rejected(write_scenario):
    message = _error(write_scenario, plan={"gpus": "A100-80G"})
    assert re.fullmatch(r".*scenario\.yaml: plan\.gpus: unknown key, did you mean 'gpu'\?.*", message)


@pytest.mark.parametrize(
    ("changes", "field", "allowed"),
    [
        ({"method": "fulll"}, "method", "full, lora, qlora"),
        ({"objective": "money"}, "objective", "cost, time"),
        ({"plan": {"offload": "cpu"}}, r"plan\.offload", "none, optimizer, all"),
        ({"plan": {"checkpointing": "yes"}}, r"plan\.checkpointing", "none, selective, full"),
        ({"plan": {"precision": "int8"}}, r"plan\.precision", "bf16, fp16, fp8, fp32"),
        ({"plan": {"term": "year"}}, r"plan\.term", "hour, day, week, month"),
        ({"training": {"framework": "deepspeed"}}, r"training\.framework", "hf, torchtune, nemo"),
    ],
    ids=["method", "objective", "offload", "checkpointing", "precision", "term", "framework"],
)
def test_closed_choices_list_their_values(write_scenario, changes, field, allowed):
    message = _error(write_scenario, **changes)
    assert re.fullmatch(rf".*scenario\.yaml: {field}: .*{re.escape(allowed)}.*", message), message


def test_zero_stage_outside_0_to_3_is_rejected(write_scenario):
    assert re.fullmatch(r".*plan\.zero_stage: .*3.*", _error(write_scenario, plan={"zero_stage": 4}))


def test_unknown_key_in_a_gpu_entry_is_rejected(tmp_path):
    path = tmp_path / "gpus.yaml"
    text = (REPO / "catalogs" / "gpus.yaml").read_text(encoding="utf-8")
    text = text.replace("    tdp_w:", "    tdp_watts: 1\n    tdp_w:", 1)  # a misspelt extra key beside the real one
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=r"gpus\[0\]\.tdp_watts: unknown key, did you mean 'tdp_w'\?"):
        validate_catalog_files([path])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.from_regex(r"[a-z][a-z_]{1,15}", fullmatch=True).filter(lambda k: k not in Scenario.model_fields))
def test_any_key_outside_the_scenario_schema_is_rejected(key):
    doc = scenario_doc()
    doc[key] = 1
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Scenario.model_validate(doc)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_round_trips_through_json(path):
    sc = load_scenario(path)
    assert Scenario.model_validate(sc.model_dump(mode="json")) == sc


def test_catalog_entries_round_trip_through_json():
    cat = load_catalog()
    for entry in [*cat.gpus.values(), *cat.offers, *cat.models.values()]:
        assert type(entry).model_validate(entry.model_dump(mode="json")) == entry


def test_estimate_round_trips_through_json():
    doc = {"status": "infeasible", "plan": None, "memory": None, "time": None, "cost": None}
    assert Estimate.model_validate(doc).model_dump(mode="json") == doc


@pytest.mark.parametrize(
    ("written", "pinned"),
    [("hour", Term.hour), ("second", Term.hour), ("minute", Term.hour), ("month", Term.month), ("month+hour", None)],
)
def test_plan_pins_read_back_the_term_solve_writes(written, pinned):
    assert PlanPins(term=written).term == pinned

"""Uncertainty bands (optimizer/models/uncertainty.py): where the percentiles come from and what they do to a plan.

The percentiles in catalogs/calibration.yaml ``accuracy`` are recomputed here from the held-out reference cases, so a
change to either model that moves its held-out errors fails until the file is regenerated (the benches print the
new values). The band arithmetic is checked against the plan it qualifies: memory scaled whole, only the compute
part of the time scaled, the cost re-billed exactly.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest
import yaml

from optimizer.catalog import load_catalog
from optimizer.errors import InputError
from optimizer.models import cost
from optimizer.models.uncertainty import ratio_quantiles
from optimizer.planner import estimate_scenario, solve_scenario
from tests.conftest import REPO
from tests.memory_reference_cases import evaluate_all, heldout_ratios

_spec = importlib.util.spec_from_file_location("time_accuracy", REPO / "bench" / "time_accuracy.py")
time_bench = sys.modules.setdefault("time_accuracy", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(time_bench)

PINS = {"gpu": "A100-80G", "cards": 2, "zero_stage": 3, "micro_batch": 2, "checkpointing": "full"}


def test_memory_percentiles_are_those_of_the_held_out_cases(catalog):
    assert catalog.calibration["accuracy"]["memory"] == ratio_quantiles(heldout_ratios(evaluate_all()))


def test_time_percentiles_are_those_of_the_held_out_cases(catalog):
    rows = time_bench.evaluate()
    assert catalog.calibration["accuracy"]["time"] == ratio_quantiles(time_bench.heldout_ratios(rows))


def test_held_out_bands_straddle_the_prediction(catalog):
    for model in ("memory", "time"):
        acc = catalog.calibration["accuracy"][model]
        assert acc["ratio_p10"] < acc["ratio_p50"] < acc["ratio_p90"]
        assert acc["ratio_p10"] < 1.0 < acc["ratio_p90"], model


@pytest.mark.parametrize("ratios", [[], [1.0, float("nan")], [0.0, 1.0], [-1.0]], ids=["empty", "nan", "zero", "neg"])
def test_ratio_quantiles_rejects_what_is_not_a_ratio(ratios):
    with pytest.raises(ValueError, match="positive finite"):
        ratio_quantiles(ratios)


def test_ratio_quantiles_interpolates_linearly():
    assert ratio_quantiles([1.0, 2.0]) == {"cases": 2, "ratio_p10": 1.1, "ratio_p50": 1.5, "ratio_p90": 1.9}


def test_band_scales_memory_and_compute_time_and_rebills(write_scenario, catalog):
    est = estimate_scenario(write_scenario(), PINS)
    acc = catalog.calibration["accuracy"]
    m, t, c, u = est.memory, est.time, est.cost, est.uncertainty
    assert u is not None
    assert u.memory.total_p10 == round(m.total * acc["memory"]["ratio_p10"])
    assert u.memory.total_p90 == round(m.total * acc["memory"]["ratio_p90"])
    compute = t.steps * t.step_seconds / 3600.0
    fixed = t.hours - compute
    assert fixed > 0  # start-up and checkpoint saves: kept out of the scaling
    for key in ("p10", "p90"):
        hours = getattr(u.time, f"hours_{key}")
        assert hours == pytest.approx(fixed + compute * acc["time"][f"ratio_{key}"], abs=1e-5)
        offer = next(o for o in catalog.offers if o.id == est.plan.offer)
        assert getattr(u.cost, f"total_{key}") == round(cost.bill(hours, offer).per_card * est.plan.cards, 2)
    assert u.memory.total_p10 < m.total < u.memory.total_p90
    assert u.time.hours_p10 < t.hours < u.time.hours_p90
    assert u.cost.total_p10 <= c.total <= u.cost.total_p90
    assert u.cost.currency == c.currency


def test_verdicts_at_the_unfavourable_end(write_scenario, catalog):
    """A deadline and budget between the prediction and its 90th percentile hold for the plan, not for its band;
    a card filled past 1 / ratio_p90 of its usable memory fits, but not at the band's high end."""
    first = estimate_scenario(write_scenario(), PINS)
    hours, total = first.time.hours, first.cost.total
    high_h, high_c = first.uncertainty.time.hours_p90, first.uncertainty.cost.total_p90
    assert hours < high_h and total < high_c
    tight = write_scenario(
        "tight.yaml",
        deadline_hours=(hours + high_h) / 2,
        budget={"amount": round((total + high_c) / 2, 2), "currency": first.cost.currency},
    )
    est = estimate_scenario(tight, PINS)
    assert est.memory.fits and est.uncertainty.time.meets_deadline_p90 is False
    assert est.uncertainty.cost.within_budget_p90 is False
    ratio = catalog.calibration["accuracy"]["memory"]["ratio_p90"]
    usable = est.memory.capacity * 0.95  # default headroom
    assert est.uncertainty.memory.fits_p90 is (est.memory.total * ratio <= usable)
    loose = estimate_scenario(write_scenario("loose.yaml", headroom=0.0, deadline_hours=10 * high_h), PINS)
    assert loose.uncertainty.time.meets_deadline_p90 is True
    assert loose.uncertainty.cost.within_budget_p90 is None  # no budget, no verdict


def test_no_deadline_or_budget_gives_no_verdict(write_scenario):
    u = estimate_scenario(write_scenario(), PINS).uncertainty
    assert u.time.meets_deadline_p90 is None and u.cost.within_budget_p90 is None


def test_solve_json_carries_the_band_and_text_shows_it(run_cli, write_scenario):
    path = write_scenario(deadline_hours=500)
    doc = json.loads(run_cli("solve", path, "--json").stdout)
    assert list(doc) == ["status", "plan", "memory", "time", "cost", "uncertainty", "offer", "requirements",
                         "checklist"]  # the offer keys of issue 13 follow the band
    assert set(doc["uncertainty"]) == {"memory", "time", "cost"}
    text = run_cli("solve", path).stdout
    assert "Uncertainty (10th-90th percentile of measured/predicted on 13 + 13 held-out cases)" in text
    assert "at the slow end: deadline met" in text


def test_infeasible_answer_keeps_the_five_contract_keys(run_cli, write_scenario):
    doc = json.loads(run_cli("solve", write_scenario(deadline_hours=0.01), "--json").stdout)
    assert doc["status"] == "infeasible"
    assert list(doc)[:5] == ["status", "plan", "memory", "time", "cost"] and "uncertainty" not in doc


def test_catalog_without_accuracy_gives_no_band(write_scenario, monkeypatch):
    monkeypatch.delitem(load_catalog().calibration, "accuracy")  # the cached object solve_scenario will use
    result = solve_scenario(write_scenario())
    assert result.best.uncertainty is None
    assert "uncertainty" not in result.best.model_dump(mode="json")


def test_band_is_deterministic(write_scenario):
    a = estimate_scenario(write_scenario(), PINS).model_dump(mode="json")
    b = estimate_scenario(write_scenario("again.yaml"), PINS).model_dump(mode="json")
    assert a == b
    assert all(math.isfinite(v) for v in a["uncertainty"]["time"].values() if isinstance(v, float))


def test_calibration_file_documents_the_section():
    text = (REPO / "catalogs" / "calibration.yaml").read_text()
    section = yaml.safe_load(text)["accuracy"]
    assert set(section) == {"memory", "time"}
    assert "bench/memory_accuracy.py" in text and "bench/time_accuracy.py" in text


@pytest.mark.parametrize(
    ("accuracy", "field", "problem"),
    [
        ({"memory": {"cases": 13, "ratio_p10": 0.8, "ratio_p50": 1.0}}, "accuracy.memory.ratio_p90", "missing"),
        ({"memory": {"cases": 1, "ratio_p10": 1.2, "ratio_p50": 1.0, "ratio_p90": 1.5}}, "accuracy.memory", "ordered"),
        ({"time": {"cases": 0, "ratio_p10": 0.8, "ratio_p50": 1.0, "ratio_p90": 1.1}}, "accuracy.time.cases", ""),
    ],
    ids=["missing-key", "unordered", "no-cases"],
)
def test_broken_accuracy_section_is_a_one_line_error(tmp_path, accuracy, field, problem):
    cal = yaml.safe_load((REPO / "catalogs" / "calibration.yaml").read_text())
    for model, values in accuracy.items():
        cal["accuracy"][model] = values
    for name in ("gpus.yaml", "models.yaml", "fx.yaml"):
        (tmp_path / name).write_text((REPO / "catalogs" / name).read_text())
    (tmp_path / "calibration.yaml").write_text(yaml.safe_dump(cal))
    with pytest.raises(InputError) as err:
        load_catalog(root=tmp_path)
    message = str(err.value)
    assert "\n" not in message and "calibration.yaml" in message and field in message and problem in message

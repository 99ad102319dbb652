"""Uncertainty bands (optimizer/models/uncertainty.py): where the percentiles come from and what they do to a plan.

The percentiles in catalogs/calibration.yaml ``accuracy`` are recomputed here from the held-out reference cases, so a
change to either model that moves its held-out errors fails until the file is regenerated (the benches print the
new values). The band arithmetic is checked against the plan it qualifies: memory scaled whole, only the compute
part of the time scaled, the cost re-billed exactly.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest
import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.errors import InputError
from optimizer.models.uncertainty import ratio_quantiles, time_band
from optimizer.solve.planner import estimate_scenario, solve_scenario
from optimizer.solve.validator import exact_bill
from tests.conftest import REPO
from tests.memory_loso import loso as memory_loso
from tests.memory_loso import loso_ratios as memory_loso_ratios

_spec = importlib.util.spec_from_file_location("loso", REPO / "bench" / "loso.py")
loso = sys.modules.setdefault("loso", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(loso)

PINS = {"gpu": "A100-80G", "cards": 2, "zero_stage": 3, "micro_batch": 2, "checkpointing": "full"}


def test_memory_percentiles_are_those_of_leave_one_source_out(catalog):
    acc = catalog.calibration["accuracy"]
    assert acc["memory"] == ratio_quantiles(memory_loso_ratios(memory_loso()), tail=True)
    assert {"memory": acc["memory"], "memory_coverage": acc["memory_coverage"]} == loso.memory_accuracy()


def test_a_plan_outside_the_measured_memory_runs_gets_a_wider_memory_band_and_says_so(write_scenario, catalog,
                                                                                     run_cli):  # fmt: skip
    acc = catalog.calibration["accuracy"]
    own, unc = acc["memory"], acc["memory_coverage"]["uncovered"]
    assert unc["ratio_p90"] != own["ratio_p90"]  # otherwise widening could not be seen
    inside = estimate_scenario(write_scenario(), PINS).uncertainty.memory  # Qwen's 72B LoRA ZeRO-3 runs on A100s
    assert "ampere/hf_deepspeed/lora/zero3/none/one-node" in acc["memory_coverage"]["cells"]
    assert inside.published_run_like_this is True and inside.ratio_p90 == own["ratio_p90"]
    assert "ada/hf_deepspeed/lora/zero3/none/one-node" not in acc["memory_coverage"]["cells"]
    est = estimate_scenario(write_scenario(), {**PINS, "gpu": "L40S"})  # ada / hf_deepspeed: no measured run
    m = est.uncertainty.memory
    assert m.published_run_like_this is False
    assert m.ratio_p10 == min(own["ratio_p10"], unc["ratio_p10"])
    assert m.ratio_p90 == max(own["ratio_p90"], unc["ratio_p90"]) != own["ratio_p90"]
    assert m.total_p90 == round(est.memory.total * m.ratio_p90)
    path = write_scenario("outside-memory.yaml")
    args = ["--gpu=L40S", "--cards=2", "--zero=3", "--micro-batch=2", "--checkpointing=full"]
    assert "memory: no published run like this" in run_cli("estimate", path, *args).stdout
    doc = json.loads(run_cli("estimate", path, *args, "--json").stdout)
    assert doc["uncertainty"]["memory"]["published_run_like_this"] is False


@pytest.mark.timeout(600)  # may compute the session's LOSO fixture (13 folds x 109 cases)
def test_time_percentiles_are_those_of_leave_one_source_out(catalog, loso_rows):
    rows = loso_rows
    acc = catalog.calibration["accuracy"]
    groups = [{k: getattr(v, "value", v) for k, v in g.items() if v is not None} for g in acc["time_groups"]]
    coverage_map = {k: acc["time_coverage"][k] for k in ("cells", "uncovered", "best_hfu", "no_p2p")}
    assert {"time": acc["time"], "time_groups": groups, "time_coverage": coverage_map} == loso.time_accuracy(rows)


@pytest.mark.timeout(600)  # may compute the session's LOSO fixture (13 folds x 109 cases)
def test_band_coverage_within_75_to_85_percent_overall_and_per_group(catalog, loso_rows):
    # Issue 21: the published figure inside the p10-p90 band of its LOSO prediction (widened for cases outside
    # the other sources' cells) for 75-85% of the cases, in every group the bands are kept for and among the
    # cases outside the covered cells
    acc = catalog.calibration["accuracy"]
    assert 0.75 <= loso.coverage(loso_rows, acc) <= 0.85
    for name, (n, share) in loso.coverage_by_group(loso_rows, acc).items():
        assert 0.75 <= share <= 0.85, (name, n, share)


def test_a_plan_outside_the_published_runs_gets_a_wider_band_and_says_so(write_scenario, catalog, run_cli):
    acc = catalog.calibration["accuracy"]
    inside = estimate_scenario(write_scenario(), PINS)  # ampere / hf_deepspeed / lora / zero3: Qwen's 72B run
    assert inside.uncertainty.time.published_run_like_this is True
    group = time_band(acc, "hf", "bf16", 1)
    assert inside.uncertainty.time.ratio_p90 == group["ratio_p90"]
    outside_pins = {**PINS, "gpu": "L40S"}  # ada / hf_deepspeed: no published run
    cell = "ada/hf_deepspeed/lora/zero3/none/one-node"
    assert cell not in acc["time_coverage"]["cells"]
    est = estimate_scenario(write_scenario(), outside_pins)
    t, unc = est.uncertainty.time, acc["time_coverage"]["uncovered"]
    assert t.published_run_like_this is False
    assert t.ratio_p10 == min(group["ratio_p10"], unc["ratio_p10"])
    assert t.ratio_p90 == max(group["ratio_p90"], unc["ratio_p90"])
    assert (t.ratio_p10, t.ratio_p90) != (group["ratio_p10"], group["ratio_p90"])  # wider than its group's
    path = write_scenario("outside.yaml")
    args = ["--gpu=L40S", "--cards=2", "--zero=3", "--micro-batch=2", "--checkpointing=full"]
    text = run_cli("estimate", path, *args).stdout
    assert "no published run like this" in text
    doc = json.loads(run_cli("estimate", path, *args, "--json").stdout)
    assert doc["uncertainty"]["time"]["published_run_like_this"] is False


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
    tim = time_band(acc, "hf", est.plan.precision.value, est.plan.nodes)  # the band of the plan's group
    for key in ("p10", "p90"):
        hours = getattr(u.time, f"hours_{key}")
        assert hours == pytest.approx(fixed + compute * tim[f"ratio_{key}"], abs=1e-5)
        offer = next(o for o in catalog.offers if o.id == est.plan.offer)
        # re-billed by the validator's exact plain loop (not cost.bill, which the band itself uses)
        assert getattr(u.cost, f"total_{key}") == pytest.approx(
            float(exact_bill(hours, offer).per_card * est.plan.cards), abs=0.0051)
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
    assert list(doc)[:6] == ["status", "plan", "memory", "time", "cost", "uncertainty"]
    assert {"offer", "requirements", "checklist"} <= set(doc)  # the offer keys of issue 13 follow the band
    assert set(doc["uncertainty"]) == {"memory", "time", "cost", "risk"}
    risk = doc["uncertainty"]["risk"]  # the default risk p90: the peak x ratio_p90 within capacity less headroom
    band = doc["uncertainty"]["memory"]
    # the planning ratio is the plan's own band at p90: the model's p90 over every case, widened outside the measured
    # cells and to the cell's worst run (coverage.memory_widened)
    assert risk["level"] == "p90" and risk["memory_ratio"] == band["ratio_p90"] >= load_catalog().calibration[
        "accuracy"]["memory"]["ratio_p90"]  # fmt: skip
    assert risk["total_at_risk"] == round(doc["memory"]["total"] * risk["memory_ratio"]) <= risk["usable"]
    assert risk["usable"] == int(doc["memory"]["capacity"] * 0.95) and risk["applies_to"] == ["memory"]
    text = run_cli("solve", path).stdout
    assert re.search(r"Uncertainty \(10th-90th percentile of measured/predicted on \d+ \+ \d+ held-out cases\)", text)
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


def test_band_of_a_long_job_is_rebilled_with_the_cheapest_terms(write_scenario, catalog):
    # a job of days: the p10/p90 hours cross day and week boundaries, so the band's cost is the exact cheapest
    # cover of each band's hours (validator.exact_bill), not the nominal cost scaled by the time ratio
    est = estimate_scenario(write_scenario(data={"tokens": 3.0e9, "epochs": 1}), PINS)
    u, offer = est.uncertainty, next(o for o in catalog.offers if o.id == est.plan.offer)
    assert est.time.hours > 48
    for key in ("p10", "p90"):
        hours = getattr(u.time, f"hours_{key}")
        want = float(exact_bill(hours, offer).per_card * est.plan.cards)
        assert getattr(u.cost, f"total_{key}") == pytest.approx(want, abs=0.0051), key
    assert u.cost.total_p10 <= est.cost.total <= u.cost.total_p90


def test_calibration_file_documents_the_section():
    text = (REPO / "catalogs" / "calibration.yaml").read_text()
    section = yaml.safe_load(text)["accuracy"]
    assert set(section) == {"memory", "memory_coverage", "time", "time_groups", "time_coverage"}
    assert "python bench/loso.py\n  # --write" in text


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

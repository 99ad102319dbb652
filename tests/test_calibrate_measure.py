"""Measurements in the reference-case schema (optimizer/inputs/measurement.py) and the log importers
(optimizer/inputs/importers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.errors import InputError
from optimizer.inputs.importers import (
    detect,
    from_nvidia_smi,
    from_torchtune_log,
    from_trainer_state,
    read_measurements,
)
from optimizer.inputs.measurement import dump_cases, load_cases, parse_cases
from optimizer.measure.calibrate import scenario_document
from tests.conftest import REFERENCE, REPO

LOGS = REPO / "tests" / "data" / "measurements"


@pytest.fixture(scope="module")
def run_doc():
    return scenario_document(LOGS / "run_scenario.yaml")


@pytest.mark.parametrize("name", ["memory_cases.yaml", "throughput_cases.yaml"])
def test_every_published_case_is_a_valid_measurement(name):
    raw = yaml.safe_load((REFERENCE / name).read_text())["cases"]
    cases = load_cases(REFERENCE / name)
    assert [c.id for c in cases] == [c["id"] for c in raw]


def test_cases_round_trip_through_dump(tmp_path: Path):
    cases = load_cases(REFERENCE / "memory_cases.yaml")[:3]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(dump_cases(cases), sort_keys=False))
    assert load_cases(path) == cases


def _case(**measured):
    return {"id": "x", "scenario": yaml.safe_load((LOGS / "run_scenario.yaml").read_text()), "measured": measured}


def test_a_peak_without_its_unit_is_a_one_line_error_naming_the_field():
    with pytest.raises(InputError, match=r"^m\.yaml: cases\[0\]\.measured: .*unit \(GB \| GiB\)") as err:
        parse_cases({"cases": [_case(peak=20.0, metric="allocated")]}, "m.yaml")
    assert "\n" not in str(err.value)


def test_a_measurement_without_a_pinned_plan_is_refused():
    doc = _case(tokens_per_second_per_gpu=100.0)
    del doc["scenario"]["plan"]
    with pytest.raises(InputError, match=r"scenario\.plan must pin"):
        parse_cases(doc, "m.yaml")


def test_a_bad_scenario_inside_a_measurement_names_its_field():
    doc = _case(tokens_per_second_per_gpu=100.0)
    doc["scenario"]["seq_len"] = -1
    with pytest.raises(InputError, match=r"^m\.yaml: cases\[0\]\.scenario\.seq_len: "):
        parse_cases({"cases": [doc]}, "m.yaml")


def test_nothing_measured_is_refused():
    with pytest.raises(InputError, match="nothing measured"):
        parse_cases(_case(per_gpu=True), "m.yaml")


@pytest.mark.parametrize(
    ("name", "kind"),
    [("trainer_state.json", "trainer_state"), ("torchtune_log.txt", "torchtune"), ("nvidia_smi.csv", "nvidia-smi"),
     ("nvidia_smi_noheader.csv", "nvidia-smi"), ("run_scenario.yaml", "cases")],
)  # fmt: skip
def test_formats_are_recognised_by_content(name, kind):
    assert detect(LOGS / name) == kind


def test_trainer_state_gives_tokens_per_second_and_step_time(run_doc):
    case = from_trainer_state(LOGS / "trainer_state.json", run_doc)
    # 3.2 samples/s x 2048 tokens / 1 card = 6553.6 tokens/s per GPU; 1 / 0.1 steps/s = 10 s per step
    assert case.measured.tokens_per_second_per_gpu == pytest.approx(6553.6)
    assert case.measured.step_seconds == pytest.approx(10.0)
    assert case.measured.peak is None


def test_trainer_state_prefers_hf_tokens_per_second_per_device(run_doc, tmp_path: Path):
    doc = yaml.safe_load((LOGS / "trainer_state.json").read_text())
    doc["log_history"][-1]["train_tokens_per_second"] = 5000.0
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(doc))
    assert from_trainer_state(path, run_doc).measured.tokens_per_second_per_gpu == pytest.approx(5000.0)


def test_an_unfinished_trainer_state_is_a_one_line_error(run_doc, tmp_path: Path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": [{"loss": 1.0, "step": 10}]}')
    with pytest.raises(InputError, match=r"trainer_state\.json: log_history: no entry with train_runtime"):
        from_trainer_state(path, run_doc)


def test_torchtune_log_median_after_warm_up_and_largest_peak(run_doc):
    case = from_torchtune_log(LOGS / "torchtune_log.txt", run_doc)
    m = case.measured
    assert m.tokens_per_second_per_gpu == pytest.approx(2410.5)  # median of 2410.5, 2400, 2420 (step 1 skipped)
    assert (m.peak, m.unit, m.metric) == (pytest.approx(15.4), "GiB", "allocated")
    assert m.peaks == {"reserved": pytest.approx(17.1)}


@pytest.mark.parametrize(("name", "gib"), [("nvidia_smi.csv", 21.0), ("nvidia_smi_noheader.csv", 20000 / 1024)])
def test_nvidia_smi_capture_gives_the_largest_reading_in_gib(run_doc, name, gib):
    m = from_nvidia_smi(LOGS / name, run_doc).measured
    assert (m.peak, m.unit, m.metric) == (pytest.approx(gib), "GiB", "nvidia-smi")


def test_a_garbled_nvidia_smi_row_names_its_line(run_doc, tmp_path: Path):
    path = tmp_path / "smi.csv"
    path.write_text("memory.used [MiB]\n20480 MiB\nN/A\n")
    with pytest.raises(InputError, match=r"smi\.csv: line 3: expected memory\.used in MiB"):
        from_nvidia_smi(path, run_doc)


def test_a_log_without_a_scenario_asks_for_one():
    with pytest.raises(InputError, match=r"trainer_state\.json: a trainer_state log does not say what ran"):
        read_measurements(LOGS / "trainer_state.json", None)


def test_imported_scenarios_carry_the_model_inline(run_doc):
    case = from_trainer_state(LOGS / "trainer_state.json", run_doc)
    assert case.scenario["model"]["layers"] == 32 and case.scenario["plan"]["gpu"] == "RTX-4090"


@pytest.mark.parametrize("framework", ["nemo", "torchtune"])
def test_the_measurement_scenario_leaves_out_a_sharding_the_file_leaves_out(framework, write_scenario, run_cli,
                                                                            tmp_path: Path):  # fmt: skip
    # the document wrote the default sharding (deepspeed), which a set training.sharding outside hf is refused as
    path = write_scenario(catalog="us", training={"framework": framework, "attention": "sdpa"})
    doc = scenario_document(path)
    assert "sharding" not in doc["training"]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run_cli("solve", again, "--json").exit_code == 0
    kept = write_scenario("set.yaml", catalog="us", training={"framework": "torchtune", "sharding": "fsdp"})
    assert scenario_document(kept)["training"]["sharding"] == "fsdp"

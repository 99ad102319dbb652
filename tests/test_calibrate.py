"""Calibration overlays: fitting (optimizer/measure/calibrate.py) and applying them (optimizer/models/overlay.py via the
space).

The published cases come from tests/data/reference (published cases with their sources); groups are GPU architecture x
engine x method x precision for time and engine x method for memory.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.errors import InputError
from optimizer.inputs.measurement import load_cases
from optimizer.measure.calibrate import calibrate, predict
from optimizer.models.overlay import load_overlay
from tests.conftest import REFERENCE, REPO

THROUGHPUT = {c.id: c for c in load_cases(REFERENCE / "throughput_cases.yaml")}
MEMORY = {c.id: c for c in load_cases(REFERENCE / "memory_cases.yaml")}
# ampere x torchtune x full x bf16: Llama 3.2 3B on one A100 (torchtune README tables, throughput_cases.yaml)
TT_A100_FIT = ["tput-tt-llama3.2-3b-full-ac", "tput-tt-llama3.2-3b-full-ac-opt-in-bwd"]
TT_A100_HELD_OUT = "tput-tt-llama3.2-3b-full-ac-act-offload"  # the shipped model is -5.8% on it
README = (REPO / "README.md").read_text(encoding="utf-8")
OTHER_GROUP = "tput-llmfoundry-mpt-7b-s2048-8xh100-sxm"  # hopper x hf_fsdp x full x bf16


def _write(tmp_path: Path, name: str, cases: list) -> str:
    docs = [c.model_dump(mode="json", exclude_none=True) for c in cases]
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"cases": docs}, sort_keys=False))
    return str(path)


def _tps(case, tmp_path: Path, overlay: str | None = None) -> float:
    return predict(case, tmp_path, Path(overlay) if overlay else None).tokens_per_second_per_gpu


def test_two_runs_of_a_group_move_a_held_out_third_toward_its_measurement(tmp_path: Path):
    fit = _write(tmp_path, "fit.yaml", [THROUGHPUT[i] for i in TT_A100_FIT])
    calibrate([fit], output=tmp_path / "cal.yaml")
    held = THROUGHPUT[TT_A100_HELD_OUT]
    measured = held.measured.tokens_per_second_per_gpu
    before, after = _tps(held, tmp_path), _tps(held, tmp_path, str(tmp_path / "cal.yaml"))
    assert abs(after / measured - 1) < abs(before / measured - 1), (before, after, measured)


def test_a_group_without_measurements_is_left_exactly_as_shipped(tmp_path: Path):
    fit = _write(tmp_path, "fit.yaml", [THROUGHPUT[i] for i in TT_A100_FIT])
    calibrate([fit], output=tmp_path / "cal.yaml")
    other = THROUGHPUT[OTHER_GROUP]
    before = predict(other, tmp_path)
    after = predict(other, tmp_path, tmp_path / "cal.yaml")
    assert after == before  # time and every memory counter


def _synthetic(case, time_ratio: float, tmp_path: Path):
    """The case with a measured tokens/s that makes real / predicted step time exactly ``time_ratio``."""
    tps = _tps(case, tmp_path) / time_ratio
    return case.model_copy(update={"measured": case.measured.model_copy(update={"tokens_per_second_per_gpu": tps})})


def test_factor_is_the_shrunk_geometric_mean(tmp_path: Path):
    # two measurements at real/predicted 1.3 with prior weight 1: f = exp(2 ln 1.3 / 3) = 1.3^(2/3) = 1.1911
    cases = [_synthetic(THROUGHPUT[i], 1.3, tmp_path) for i in TT_A100_FIT]
    result = calibrate([_write(tmp_path, "syn.yaml", cases)])
    (group,) = result.overlay.time
    assert group.factor == pytest.approx(1.1911, abs=1e-4)
    assert (group.arch, group.engine, group.method.value, group.precision.value) == ("ampere", "torchtune", "full",
                                                                                       "bf16")


@pytest.mark.parametrize(("ratio", "factor"), [(1.44, 1.2), (6.0, 2.0), (0.15, 0.5)])
def test_a_single_measurement_moves_its_group_at_most_half_way_and_within_the_cap(tmp_path: Path, ratio, factor):
    # prior weight 1: one measurement gives sqrt(ratio) (1.44 -> 1.2), capped to [1/2, 2] (6 -> 2, 0.15 -> 0.5)
    case = _synthetic(THROUGHPUT[TT_A100_FIT[0]], ratio, tmp_path)
    (group,) = calibrate([_write(tmp_path, "one.yaml", [case])]).overlay.time
    assert group.factor == pytest.approx(factor, abs=1e-4)


def test_a_measurement_twenty_times_off_is_reported_and_not_fitted(tmp_path: Path):
    case = _synthetic(THROUGHPUT[TT_A100_FIT[0]], 20.0, tmp_path)
    result = calibrate([_write(tmp_path, "far.yaml", [case])])
    (row,) = [r for r in result.rows if r.model == "time"]
    assert result.overlay.time == [] and not row.used and "beyond x10 either way" in row.note


def test_calibrate_with_only_an_outlier_writes_no_overlay_and_exits_1(run_cli, tmp_path: Path):
    # it wrote an overlay with no group (one that changes nothing) and exited 0, the measured column showing "-"
    case = _synthetic(THROUGHPUT[TT_A100_FIT[0]], 20.0, tmp_path)
    far = _write(tmp_path, "far.yaml", [case])
    result = run_cli("calibrate", far, "-o", tmp_path / "cal.yaml")
    assert result.exit_code == 1 and not (tmp_path / "cal.yaml").exists()
    assert "nothing to fit" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    measured = case.measured.tokens_per_second_per_gpu
    assert f"{measured:,.0f} tok/s/GPU" in " ".join(result.stdout.split())
    assert "Overlay written" not in result.stdout


def test_a_run_on_part_of_an_instance_sold_whole_is_calibrated(tmp_path: Path, catalog):
    # one V100 (ZeRO-Offload's published run): the built-in catalogs rent V100s only as whole 8-card instances, and
    # the measurement had been refused ("cards=1 splits an instance") although it is a run, not a rental
    (offer,) = [o for o in catalog.offers if o.gpu == "V100-32G"]
    assert offer.sold_as == "instance" and offer.unit_cards == 8
    case = THROUGHPUT["tput-zero-offload-gpt2-10b-1xv100"]
    shipped = _tps(case, tmp_path)
    timed = case.model_copy(update={"measured": case.measured.model_copy(
        update={"model_tflops_per_gpu": None, "tokens_per_second_per_gpu": round(shipped * 1.2, 1)})})
    result = calibrate([_write(tmp_path, "v100.yaml", [timed])], output=tmp_path / "cal.yaml")
    (row,) = [r for r in result.rows if r.model == "time"]
    assert row.used and row.before == pytest.approx(shipped)
    assert _tps(timed, tmp_path, str(tmp_path / "cal.yaml")) > shipped


def test_a_stronger_prior_moves_less(tmp_path: Path):
    case = _synthetic(THROUGHPUT[TT_A100_FIT[0]], 1.5, tmp_path)
    path = _write(tmp_path, "one.yaml", [case])
    weak, strong = (calibrate([path], prior_weight=k).overlay.time[0].factor for k in (1.0, 4.0))
    assert strong == pytest.approx(1.5 ** (1 / 5), abs=1e-4) and 1.0 < strong < weak


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    """An overlay fitted on every published time and memory case, and its report rows."""
    tmp = tmp_path_factory.mktemp("all")
    return calibrate([str(REFERENCE / "throughput_cases.yaml"), str(REFERENCE / "memory_cases.yaml")],
                     output=tmp / "cal.yaml")  # fmt: skip


def _log_err(value: float, measured: float) -> float:
    return math.log(value / measured) ** 2


def test_an_overlay_never_makes_a_fitted_group_worse(everything):
    # Shrinking toward the mean log ratio cannot raise a group's sum of squared log errors; the factor's rounding to
    # 4 decimals is the only noise allowed.
    groups: dict[tuple[str, str], list] = {}
    for row in everything.rows:
        if row.used:
            groups.setdefault((row.model, row.group), []).append(row)
    assert len(groups) >= 10
    for key, rows in groups.items():
        before = sum(_log_err(r.before, r.measured) for r in rows)
        after = sum(_log_err(r.after, r.measured) for r in rows)
        assert after <= before + 1e-6 * len(rows), (key, before, after)


def test_an_overlay_does_not_raise_the_median_error_of_the_fitted_cases(everything):
    for model in ("time", "memory"):
        rows = [r for r in everything.rows if r.used and r.model == model]
        before = statistics.median(abs(r.before / r.measured - 1) for r in rows)
        after = statistics.median(abs(r.after / r.measured - 1) for r in rows)
        assert after <= before + 0.005, (model, before, after)


def test_boundary_and_tflops_only_cases_are_reported_not_fitted(everything, tmp_path: Path):
    skipped = {r.id: r.note for r in everything.rows if not r.used}
    assert skipped["mem-torchtitan-llama2-70b-bs2-selective-oom"].startswith("not used: a fits/oom boundary")
    # the TFLOP/s-only case runs on one V100 SXM2, which the built-in offers rent only as 8-card instances: it is
    # evaluated on the card it ran on (a run, not a rental), and the TFLOP/s figure is the reason it is not fitted
    zero = "tput-zero-offload-gpt2-10b-1xv100"
    assert skipped[zero] == "not used: model TFLOP/s or wall minutes only (conventions and start-up differ)"


def test_a_consistent_group_gets_the_shipped_band_pulled_toward_one(tmp_path: Path, catalog):
    # two measurements, both at real/predicted 1.3: the band is the shipped one scaled in log terms by
    # sqrt(k / (n + k)) = sqrt(1/3), widened up to the leave-one-out residual: each measurement against the factor
    # of the other alone, 1.3 / 1.3^(1/2) = 1.1402
    shipped = catalog.calibration["accuracy"]["time"]
    cases = [_synthetic(THROUGHPUT[i], 1.3, tmp_path) for i in TT_A100_FIT]
    (group,) = calibrate([_write(tmp_path, "syn.yaml", cases)]).overlay.time
    s = math.sqrt(1 / 3)
    assert group.band.ratio_p10 == pytest.approx(min(shipped["ratio_p10"] ** s, 1.1402), abs=2e-3)
    assert group.band.ratio_p90 == pytest.approx(max(shipped["ratio_p90"] ** s, 1.1402), abs=2e-3)
    assert group.band.ratio_p90 - group.band.ratio_p10 < shipped["ratio_p90"] - shipped["ratio_p10"]


def test_a_scattered_group_keeps_a_band_as_wide_as_its_own_residuals(everything):
    for g in everything.overlay.time + everything.overlay.memory:
        rows = [r for r in everything.rows if r.used and r.id in g.measurements and r.group == " x ".join(g.key)]
        real = [(r.before / r.measured if r.model == "time" else r.measured / r.before) / g.factor for r in rows]
        low, high = np.exp(np.quantile(np.log(real), [0.1, 0.9]))  # percentiles of the log residuals
        assert g.band.ratio_p10 <= low + 1e-3 and g.band.ratio_p90 >= high - 1e-3, (g.key, real, g.band)


def test_the_overlay_file_loads_back_and_is_deterministic(everything, tmp_path: Path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for out in (a, b):
        calibrate([str(REFERENCE / "throughput_cases.yaml")], output=out)
    assert a.read_bytes() == b.read_bytes()
    assert load_overlay(a).overlay.time


# --------------------------------------------------------------------------------------------- applied to plans


@pytest.fixture
def overlay_7b(tmp_path: Path) -> Path:
    """An overlay with one time group (ada x hf_deepspeed x lora x bf16, x1.25) and one memory group (x1.1)."""
    doc = {
        "format": "ftopt-calibration-overlay/1", "shrinkage": {"prior_weight": 1.0, "max_factor": 2.0},
        "measurements": [{"id": "run-1", "file": "run.yaml", "used": ["time", "memory"]}],
        "time": [{"arch": "ada", "engine": "hf_deepspeed", "method": "lora", "precision": "bf16", "factor": 1.25,
                  "n": 1, "mean_log_ratio": 0.45, "measurements": ["run-1"],
                  "band": {"cases": 13, "ratio_p10": 0.97, "ratio_p90": 1.05}}],
        "memory": [{"engine": "hf_deepspeed", "method": "lora", "factor": 1.1, "n": 1, "mean_log_ratio": 0.2,
                    "measurements": ["run-1"]}],
    }  # fmt: skip
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


ESTIMATE_4090 = ("--gpu", "RTX-4090", "--cards", "1", "--micro-batch", "1", "--checkpointing", "full", "--json")


def test_estimate_applies_the_overlay_and_names_it(run_cli, write_scenario, overlay_7b):
    path = write_scenario()
    plain = json.loads(run_cli("estimate", path, *ESTIMATE_4090).stdout)
    out = json.loads(run_cli("estimate", path, *ESTIMATE_4090, "--calibration", overlay_7b).stdout)
    assert out["time"]["step_seconds"] == pytest.approx(plain["time"]["step_seconds"] * 1.25, rel=1e-5)
    assert out["time"]["tokens_per_second"] == pytest.approx(plain["time"]["tokens_per_second"] / 1.25, rel=1e-5)
    assert out["memory"]["total"] == pytest.approx(plain["memory"]["total"] * 1.1, rel=1e-6)
    assert out["calibration"]["overlay"] == str(overlay_7b)
    assert out["calibration"]["time"]["factor"] == 1.25 and out["calibration"]["time"]["measurements"] == ["run-1"]
    assert "calibration" not in plain


def test_the_overlay_corrects_the_steps_the_hours_are_built_from(run_cli, write_scenario, overlay_7b):
    """The wall clock's parts add up after the correction: training = steps x corrected step (was the model's)."""
    out = json.loads(run_cli("estimate", write_scenario(), *ESTIMATE_4090, "--calibration", overlay_7b).stdout)["time"]
    assert out["train_hours"] == pytest.approx(out["steps"] * out["step_seconds"] / 3600, rel=1e-5)
    parts = out["train_hours"] + out["checkpoint_hours"] + out["startup_hours"] + out["interruption_hours"]
    assert out["hours"] == pytest.approx(parts, rel=1e-5)


def test_the_calibrated_group_gets_its_band_and_the_other_model_keeps_the_shipped_one(run_cli, write_scenario,
                                                                                      overlay_7b, catalog):  # fmt: skip
    path = write_scenario()
    out = json.loads(run_cli("estimate", path, *ESTIMATE_4090, "--calibration", overlay_7b).stdout)["uncertainty"]
    assert (out["time"]["ratio_p10"], out["time"]["ratio_p90"]) == (0.97, 1.05)
    shipped = catalog.calibration["accuracy"]["memory"]
    assert (out["memory"]["ratio_p10"], out["memory"]["ratio_p90"]) == (shipped["ratio_p10"], shipped["ratio_p90"])


def test_a_plan_outside_every_group_is_unchanged(run_cli, write_scenario, overlay_7b):
    path = write_scenario(training={"framework": "torchtune", "optimizer": "adamw", "attention": "sdpa"})
    plain = json.loads(run_cli("estimate", path, *ESTIMATE_4090).stdout)
    out = json.loads(run_cli("estimate", path, *ESTIMATE_4090, "--calibration", overlay_7b).stdout)
    assert out["time"] == plain["time"] and out["memory"] == plain["memory"]
    assert out["calibration"] == {"overlay": str(overlay_7b), "time": None, "memory": None}


def test_the_scenario_key_applies_an_overlay_relative_to_the_scenario(run_cli, write_scenario, overlay_7b):
    path = write_scenario(calibration="cal.yaml")
    out = json.loads(run_cli("solve", path, "--json").stdout)
    assert out["calibration"]["overlay"].endswith("cal.yaml")


def test_a_missing_overlay_is_a_one_line_error(run_cli, write_scenario, tmp_path: Path):
    result = run_cli("solve", write_scenario(), "--calibration", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("--calibration: calibration overlay "
                                          f"'{tmp_path / 'nope.yaml'}' not found (ftopt calibrate -o FILE)")


def test_a_malformed_overlay_names_the_field(run_cli, write_scenario, overlay_7b):
    doc = yaml.safe_load(overlay_7b.read_text())
    doc["time"][0]["factor"] = -1
    overlay_7b.write_text(yaml.safe_dump(doc))
    result = run_cli("solve", write_scenario(), "--calibration", overlay_7b)
    assert result.exit_code == 2 and "time[0].factor" in result.stderr and result.stderr.count("\n") == 1


def test_calibrate_cli_reports_before_and_after_as_json(run_cli, tmp_path: Path):
    fit = _write(tmp_path, "fit.yaml", [THROUGHPUT[i] for i in TT_A100_FIT])
    result = run_cli("calibrate", fit, "-o", tmp_path / "cal.yaml", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = doc["measurements"]
    assert {r["id"] for r in rows} == set(TT_A100_FIT)
    assert all(abs(r["error_after"]) < abs(r["error_before"]) for r in rows)
    assert doc["overlay"]["time"][0]["n"] == 2 and (tmp_path / "cal.yaml").is_file()


def test_calibrate_cli_needs_a_scenario_for_logs(run_cli):
    result = run_cli("calibrate", REFERENCE.parent / "measurements" / "trainer_state.json")
    assert result.exit_code == 2 and "pass --scenario FILE" in result.stderr


def test_batch_applies_the_overlay_to_every_scenario(run_cli, write_scenario, overlay_7b, tmp_path: Path):
    # the overlay only slows ada x hf_deepspeed x lora x bf16 down (x1.25): the optimum cannot get cheaper, and the
    # plan on the ada card the shipped model picks must change (slower, or another GPU); the scenario allows the ada
    # cards only, so that the plain optimum is on one whatever the memory band admits elsewhere
    ada = sorted(g.id for g in load_catalog().gpus.values() if g.arch == "ada")
    path = write_scenario(allow={"gpus": ada})
    rows = {}
    for name, extra in (("plain", ()), ("calibrated", ("--calibration", overlay_7b))):
        out = tmp_path / f"{name}.jsonl"
        assert run_cli("batch", path, "-o", out, "--workers", "1", *extra).exit_code == 0
        rows[name] = json.loads(out.read_text())
    plain, cal = rows["plain"], rows["calibrated"]
    assert load_catalog().gpus[plain["gpu"]].arch == "ada"
    assert cal["cost"] >= plain["cost"] and (cal["hours"], cal["gpu"]) != (plain["hours"], plain["gpu"])


def test_a_measurement_the_catalog_cannot_evaluate_is_reported_and_the_rest_fitted(tmp_path: Path):
    huge = THROUGHPUT[TT_A100_FIT[0]]
    scenario = {**huge.scenario, "plan": {**huge.scenario["plan"], "cards": 100_000}}
    cases = [huge.model_copy(update={"id": "too-big", "scenario": scenario}), THROUGHPUT[TT_A100_FIT[1]]]
    result = calibrate([_write(tmp_path, "mixed.yaml", cases)])
    (skipped,) = [r for r in result.rows if r.id == "too-big"]
    assert not skipped.used and skipped.note.startswith("not used: ") and "plan.cards" in skipped.note
    assert [g.n for g in result.overlay.time] == [1]


def _readme_measurement(tmp_path: Path, name: str, case_id: str, tp: int) -> Path:
    """README's my-measurement.yaml (a published MPT-7B run on 8 x A100-80G) with its id and tp pin replaced."""
    doc = yaml.safe_load(re.search(r"# file: my-measurement\.yaml\n(.*?)```", README, flags=re.S).group(1))
    doc["id"] = case_id
    doc["scenario"]["plan"]["tp"] = tp
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("as_json", [False, True])
def test_calibrate_with_no_usable_measurement_is_its_one_line_error_and_writes_nothing(run_cli, tmp_path: Path,
                                                                                       as_json: bool):  # fmt: skip
    # tp must divide MPT-7B's 32 heads: the only measurement cannot be evaluated, so there is nothing to fit
    bad = _readme_measurement(tmp_path, "m.yaml", "mpt-tp3", tp=3)
    out = tmp_path / "cal.yaml"
    result = run_cli("calibrate", bad, "-o", out, *(["--json"] if as_json else []))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"ftopt: error: {bad}: mpt-tp3: scenario.plan.tp: tp=3 must divide the attention heads "
                             "(32) and kv_heads (32) of MPT-7B; allowed: 1, 2, 4, 8, 16, 32\n")  # fmt: skip
    assert not out.exists()


def test_calibrate_names_the_first_measurement_when_none_is_usable(tmp_path: Path):
    first = _readme_measurement(tmp_path, "a.yaml", "first-tp3", tp=3)
    second = _readme_measurement(tmp_path, "b.yaml", "second-tp5", tp=5)
    with pytest.raises(InputError, match=r"^.*a\.yaml: first-tp3: scenario\.plan\.tp: tp=3 "):
        calibrate([str(first), str(second)], output=tmp_path / "cal.yaml")
    assert not (tmp_path / "cal.yaml").exists()


def test_calibrate_with_one_usable_measurement_reports_the_other_and_writes_the_overlay(run_cli, tmp_path: Path):
    bad = _readme_measurement(tmp_path, "bad.yaml", "mpt-tp3", tp=3)
    good = _readme_measurement(tmp_path, "good.yaml", "mpt-tp1", tp=1)
    out = tmp_path / "cal.yaml"
    result = run_cli("calibrate", bad, good, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in json.loads(result.stdout)["measurements"]}
    assert not rows["mpt-tp3"]["used"] and "scenario.plan.tp: tp=3 must divide" in rows["mpt-tp3"]["note"]
    assert rows["mpt-tp1"]["used"] and load_overlay(out).overlay.time[0].n == 1


def test_an_overlay_band_upside_down_is_refused():
    """ratio_p10 above ratio_p90 was accepted and gave hours_p10 > hours_p90 in every plan it corrected."""
    from pydantic import ValidationError

    from optimizer.models.overlay import Band

    assert Band(cases=3, ratio_p10=0.9, ratio_p90=1.2).ratio_p90 == 1.2
    with pytest.raises(ValidationError, match="must not exceed ratio_p90"):
        Band(cases=3, ratio_p10=1.5, ratio_p90=1.187)


def test_a_log_with_a_scenario_that_pins_too_little_is_the_scenarios_one_line_error(run_cli, tmp_path: Path):
    # trainer_state.json with a scenario lacking plan.cards raised KeyError (a traceback); nvidia-smi named the log
    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"train_runtime": 100, "train_samples_per_second": 2.0}]}')
    scenario = tmp_path / "run.yaml"
    scenario.write_text(yaml.safe_dump({**yaml.safe_load((REPO / "scenarios" / "7b-lora.yaml").read_text()),
                                        "plan": {"gpu": "H100-SXM"}}))  # fmt: skip
    done = run_cli("calibrate", state, "--scenario", scenario)
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"{scenario}: plan: " in done.stderr and "missing: cards, micro_batch" in done.stderr


@pytest.mark.parametrize("option", ["--prior-weight", "--max-factor"])
def test_a_calibrate_option_error_names_the_option_as_typed(run_cli, tmp_path: Path, option: str):
    fit = _write(tmp_path, "fit.yaml", [THROUGHPUT[i] for i in TT_A100_FIT])
    done = run_cli("calibrate", fit, option, "nan")
    assert done.exit_code == 2 and f"ftopt calibrate: {option}: must be a finite number" in done.stderr


def test_an_overlay_group_of_an_unknown_architecture_is_refused(run_cli, write_scenario, overlay_7b):
    # arch: pascal loaded and silently never applied (engine was checked, arch was not); the allowed values are
    # gpus.yaml's architectures, the same list as the GPU schema's
    import typing

    from optimizer.inputs.schema_catalog import Gpu
    from optimizer.models.overlay import Arch

    assert typing.get_args(Arch) == typing.get_args(Gpu.model_fields["arch"].annotation)
    doc = yaml.safe_load(Path(overlay_7b).read_text())
    doc["time"][0]["arch"] = "pascal"
    bad = Path(overlay_7b).with_name("pascal.yaml")
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = run_cli("solve", write_scenario(), "--calibration", bad)
    assert done.exit_code == 2 and "time[0].arch: must be one of volta" in done.stderr

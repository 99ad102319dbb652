"""``ftopt probe``: the trial it chooses, its cost and the files it writes (no torch; tests_real/ runs the script)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer import probe_script
from optimizer.catalog import load_scenario
from optimizer.measure import parse_cases
from optimizer.planner import estimate_scenario, solve_scenario
from optimizer.probe import probe_scenario
from optimizer.schema import Scenario
from optimizer.yamlio import validate
from tests.conftest import REPO

SEVEN_B = REPO / "scenarios" / "7b-lora.yaml"
SEVENTY_B = REPO / "scenarios" / "70b.yaml"


@pytest.fixture(scope="module")
def seven_b_zero0(tmp_path_factory) -> Path:
    """7B LoRA pinned to a plan without ZeRO (one card reproduces it): the premise of the tests that use it, stated
    rather than left to whichever plan the solver prefers today."""
    scenario = tmp_path_factory.mktemp("scenario") / "7b-lora-zero0.yaml"
    scenario.write_text(SEVEN_B.read_text() + "plan: {zero_stage: 0}\n")
    return scenario


@pytest.fixture(scope="module")
def probe_7b(tmp_path_factory, seven_b_zero0):
    out = tmp_path_factory.mktemp("probe7b")
    return probe_scenario(seven_b_zero0, out), json.loads((out / "probe_config.json").read_text())


@pytest.fixture(scope="module")
def probe_70b(tmp_path_factory):
    out = tmp_path_factory.mktemp("probe70b")
    return probe_scenario(SEVENTY_B, out), json.loads((out / "probe_config.json").read_text())


def test_the_trial_keeps_the_plans_per_gpu_configuration(probe_7b):
    probe, cfg = probe_7b
    p, t = probe.plan.plan, probe.trial.plan
    assert (t.gpu, t.offer, t.micro_batch, t.checkpointing, t.precision, t.zero_stage, t.offload) == (
        p.gpu, p.offer, p.micro_batch, p.checkpointing, p.precision, p.zero_stage, p.offload)  # fmt: skip
    assert t.grad_accum == 1 and t.cards == 1  # no ZeRO: one card reproduces everything per GPU
    seq_len = load_scenario(SEVEN_B).seq_len
    assert (cfg["micro_batch"], cfg["seq_len"], cfg["checkpointing"]) == (p.micro_batch, seq_len,
                                                                           p.checkpointing.value)  # fmt: skip
    assert cfg["scenario"]["seq_len"] == seq_len


def test_a_zero_plan_is_probed_on_the_fewest_cards_that_fit(probe_70b, tmp_path: Path):
    probe, cfg = probe_70b
    p, t = probe.plan.plan, probe.trial.plan
    assert p.zero_stage == 3 and t.zero_stage == 3
    assert t.cards <= p.dp and p.dp % t.cards == 0 and probe.trial.memory.fits
    assert cfg["cards"] == t.cards and cfg["zero_stage"] == 3 and cfg["sharding"] == "deepspeed"
    if t.cards == 1:  # 70B full fine-tuning fits one card only with everything (parameters too) on the host
        assert p.offload.value == "all"
        return
    half = dict(cfg["scenario"], global_batch=cfg["micro_batch"] * t.cards // 2)
    half["plan"] = dict(half["plan"], cards=t.cards // 2)
    path = tmp_path / "half.yaml"
    path.write_text(json.dumps(half))
    assert not estimate_scenario(path, {}).memory.fits


def test_the_trial_is_billed_by_the_hour_for_warm_up_and_measured_steps(probe_7b):
    probe, _ = probe_7b
    t = probe.trial
    assert t.plan.term in ("hour", "minute", "second")  # the hourly price, in the offer's increments
    assert t.time.steps == probe.steps + probe.warmup
    assert 0 < t.cost.total < probe.plan.cost.total


def test_the_price_of_a_ten_percent_time_error_is_shown(probe_7b):
    probe, _ = probe_7b
    cost = probe.plan.cost.total
    assert 0 < probe.worth <= 0.11 * cost + 1.0, (probe.worth, cost)
    line = next(x for x in probe.lines() if x.startswith("probe: "))
    assert f"a 10% time error on this plan is worth {probe.worth:,.2f}" in line
    assert line.startswith(f"probe: 1 x {probe.plan.plan.gpu} for ")


def test_the_probe_writes_its_script_and_config(tmp_path: Path):
    probe_scenario(SEVEN_B, tmp_path)
    assert (tmp_path / "probe.py").read_text() == Path(probe_script.__file__).read_text()
    cfg = json.loads((tmp_path / "probe_config.json").read_text())
    assert cfg["model"]["num_hidden_layers"] == 32 and cfg["model"]["family"] == "llama"


def test_the_measurement_scenario_is_a_valid_case_that_estimate_accepts(probe_7b, tmp_path: Path):
    _, cfg = probe_7b
    doc = {"id": cfg["id"], "scenario": cfg["scenario"], "measured": {"step_seconds": 1.0}}
    (case,) = parse_cases(doc, "probe")
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(case.scenario))
    assert estimate_scenario(path, {}).plan.cards == cfg["cards"]


def test_the_tiny_scenario_describes_what_the_cpu_run_trains(probe_7b):
    _, cfg = probe_7b
    tiny = probe_script.tiny_config(cfg)
    doc = probe_script.tiny_scenario(tiny, 4)
    sc = validate(Scenario, doc, "tiny")
    assert (sc.model.layers, sc.model.hidden, sc.seq_len) == (2, 64, 64)
    assert sc.model.heads % sc.model.kv_heads == 0 and sc.plan.cards == 1 and sc.plan.zero_stage == 0
    assert sc.global_batch == tiny["micro_batch"] and sc.data.total_tokens == 4 * tiny["micro_batch"] * 64


def test_deepspeed_settings_follow_the_plan():
    cfg = {"zero_stage": 3, "sharding": "deepspeed", "offload": "optimizer"}
    ds = probe_script.ds_config(cfg)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu" and ds["optimizer"]["type"] == "AdamW"
    assert probe_script.ds_config({**cfg, "zero_stage": 0}) is None
    assert probe_script.fsdp_args({**cfg, "sharding": "fsdp", "layer_class": "LlamaDecoderLayer"})["fsdp"] == (
        "full_shard offload auto_wrap")


def test_a_tensor_parallel_plan_is_refused_with_one_line(run_cli, write_scenario, tmp_path: Path):
    # nemo runs tensor parallelism (hf would refuse tp=2 itself); the probe, which runs HF, must refuse it
    path = write_scenario(plan={"gpu": "A100-80G", "cards": 2, "tp": 2},
                          training={"framework": "nemo", "optimizer": "adamw", "attention": "flash"})
    result = run_cli("probe", path, "--out", tmp_path / "p")
    assert result.exit_code == 2 and "the probe runs data parallel only" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "p").exists()


def test_probe_cli_prints_cost_and_next_steps(run_cli, tmp_path: Path, seven_b_zero0):
    result = run_cli("probe", seven_b_zero0, "--out", tmp_path / "p", "--steps", "10")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "probe: 1 x " in text and "time error on this plan is worth" in text
    assert f"ftopt calibrate {tmp_path / 'p'}/measurement.yaml" in text


def test_solve_and_probe_agree_on_the_plan(probe_7b, seven_b_zero0):
    probe, _ = probe_7b
    assert probe.plan == solve_scenario(seven_b_zero0).best


def test_an_offer_without_an_hourly_price_bills_the_trial_by_its_shortest_term(write_scenario, tmp_path: Path):
    path = write_scenario(catalog="us", plan={"offer": "aws-capacity-block-p5-h100"})
    probe = probe_scenario(path, tmp_path / "p")
    assert probe.trial.plan.term == "day" and probe.trial.plan.billed_units == {"day": 1}
    assert any("billed by day" in line for line in probe.lines())

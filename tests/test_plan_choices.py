"""Small plan choices a new user noticed: ties go to the simpler plan, flash only where it runs, catalogs added."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import Attention
from optimizer.models.attention import attention_on, runs_flash
from optimizer.solve.planner import Overrides, estimate_scenario, solve_scenario

from .conftest import REPO


def test_one_gpu_qlora_plan_takes_zero_0_when_zero_1_is_no_faster(tmp_path):
    # at risk p50 both stages fit the 24 GB card (at the default p90, the shipped scenario's ZeRO-0 plan does not:
    # PEFT's fp32 non-linear weights put its peak x 1.256 over the card, and DeepSpeed ZeRO-1 keeps them in 16 bits)
    doc = yaml.safe_load((REPO / "scenarios/7b-qlora.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "7b-qlora-p50.yaml"
    path.write_text(yaml.safe_dump({**doc, "risk": "p50"}, sort_keys=False), encoding="utf-8")
    plan = solve_scenario(path).best.plan
    assert plan is not None and plan.dp == 1
    assert plan.zero_stage == 0
    pins = {"gpu": plan.gpu, "cards": 1, "micro_batch": plan.micro_batch, "checkpointing": plan.checkpointing.value,
            "offload": plan.offload.value}  # fmt: skip
    zero0, zero1 = (estimate_scenario(path, {**pins, "zero_stage": z}) for z in (0, 1))
    assert zero0.memory.fits and zero1.memory.fits and zero1.time.step_seconds >= zero0.time.step_seconds


def test_flash_attention_needs_compute_capability_8_or_an_mi300(catalog):
    assert not runs_flash(catalog.gpus["V100-32G"])
    assert runs_flash(catalog.gpus["A100-80G"]) and runs_flash(catalog.gpus["H100-SXM"])
    assert runs_flash(catalog.gpus["MI300X"])
    assert attention_on(catalog.gpus["V100-32G"], Attention.eager) is Attention.eager


def test_a_v100_plan_runs_sdpa_not_flash(run_cli, write_scenario):
    # Llama-3.1-8B is published in bf16: V100 plans need allow.fp16_for_bf16 (docs/precision.md)
    # (the us catalog's V100 is the PCIe card, catalogs/offers/us.yaml akash-v100-32g-pcie)
    path = write_scenario(allow={"gpus": ["V100-PCIe-32G"], "fp16_for_bf16": True}, catalog="us")
    doc = json.loads(run_cli("solve", path, "--json").stdout)
    assert doc["plan"]["gpu"] == "V100-PCIe-32G"
    assert doc["plan"]["attention"] == "sdpa"
    a100 = json.loads(run_cli("solve", write_scenario("a100.yaml", allow={"gpus": ["A100-80G"]}), "--json").stdout)
    assert a100["plan"]["attention"] == "flash"


def _own_offer(tmp_path: Path) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "currency": "USD", "offers": [{
        "id": "mine-h100", "provider": "Mine", "gpu": "H100-SXM", "cards_per_node": 8,
        "prices": {"hour": {"amount": 0.01, "source": "test quote", "as_of": "2026-11-30"}}}]}))  # fmt: skip
    return path


def test_add_catalog_offers_beside_the_scenarios_catalog_and_catalog_replaces_it(tmp_path: Path):
    mine = str(_own_offer(tmp_path))
    scenario = REPO / "scenarios/7b-lora.yaml"
    added = solve_scenario(scenario, Overrides(add_catalog=[mine]))
    assert added.best.plan.offer == "mine-h100"  # far cheaper than anything listed
    replaced = solve_scenario(scenario, Overrides(catalog=[mine]))
    assert {e.plan.offer for e in [replaced.best, *replaced.alternatives]} == {"mine-h100"}
    offers_us = {o.id for o in load_catalog([REPO / "catalogs/offers/us.yaml"]).offers}
    assert {e.plan.offer for e in added.alternatives} <= offers_us


def test_catalog_help_says_it_replaces_and_add_catalog_adds(run_cli):
    text = " ".join(run_cli("solve", "--help").stdout.split())
    assert "REPLACES the scenario's catalog" in text and "--add-catalog" in text

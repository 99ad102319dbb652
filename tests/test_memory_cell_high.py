"""The worst measured run of a memory cell widens the band of the plans in it, and the solver plans at it.

calibration.yaml ``accuracy.memory_coverage.cell_high`` names, per coverage cell, the measured run that peaked
furthest above its leave-one-source-out prediction, where that ratio is above the p90 of every case
(models/coverage.py ``memory_widened``; docs/memory-model.md section 5.4). The expectations here are read from the
reference cases and the calibration file, not from the code under test: each stored entry is checked against the
held-out ratios of its cell, and the plan checks use the ratio stored for the plan's own cell.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from optimizer.solve.planner import estimate_scenario, prepare, solve_scenario
from optimizer.solve.validator import check_plan
from tests.conftest import REPO
from tests.memory_loso import linear_terms, loso

SUPERSEDED = yaml.safe_load((REPO / "tests" / "data" / "reference" / "superseded.yaml").read_text())["memory"]
PEFT_CELL = "ada/hf_fsdp/qlora/zero3/all/one-node"  # PEFT's Llama-2-70B QLoRA, FSDP CPU offload, 2 x 24 GB
PEFT_CASE = "mem-peft-llama2-70b-qlora-fsdp-cpu-offload-2x24g"


@pytest.fixture(scope="module")
def held_out():
    """Per measured case: (cell, source, measured / predicted with the constants fitted without its source)."""
    cases = linear_terms()
    ratio = {cid: 1.0 / (1.0 + e) for fold in loso(cases) for cid, e in fold.errors.items()}
    return {c.result.id: (c.result.cell, c.result.source, ratio[c.result.id]) for c in cases}


def test_each_cell_high_is_the_worst_held_out_run_of_its_cell_above_the_p90(catalog, held_out):
    acc = catalog.calibration["accuracy"]
    p90, high = acc["memory"]["ratio_p90"], acc["memory_coverage"]["cell_high"]
    assert high, "no cell has a run above the p90: nothing to check"
    counted = {cid: v for cid, v in held_out.items() if cid not in SUPERSEDED}
    for cell, entry in high.items():
        in_cell = {cid: r for cid, (c, _, r) in counted.items() if c == cell}
        worst = max(in_cell, key=in_cell.get)
        assert entry["case"] == worst and entry["ratio"] == math.ceil(in_cell[worst] * 1000 - 1e-6) / 1000 > p90
    for cid, (cell, _, r) in counted.items():  # no cell left out whose worst run is above the p90
        assert cell in high or r <= p90, cid


def test_superseded_cases_were_remeasured_by_their_source_in_the_same_cell(held_out):
    for cid, entry in SUPERSEDED.items():
        later = entry["superseded_by"]
        assert cid in held_out and later in held_out and later not in SUPERSEDED
        (cell, source, ratio), (later_cell, later_source, later_ratio) = held_out[cid], held_out[later]
        assert (cell, source) == (later_cell, later_source) and later_ratio < ratio, cid


def _peft_like(write_scenario, name="peft.yaml", **changes):
    return write_scenario(name, model="Llama-3.1-70B", method="qlora", catalog="cn",
                          training={"framework": "hf", "sharding": "fsdp", "optimizer": "adamw",
                                    "attention": "flash"}, **changes)  # fmt: skip


PEFT_PINS = {"gpu": "RTX-4090", "cards": 2, "zero_stage": 3, "offload": "all", "checkpointing": "full"}


def test_a_plan_in_the_cell_gets_its_worst_run_as_ratio_p90_and_says_so(write_scenario, catalog, run_cli):
    acc = catalog.calibration["accuracy"]
    worst = acc["memory_coverage"]["cell_high"][PEFT_CELL]
    assert worst["case"] == PEFT_CASE and worst["ratio"] > acc["memory"]["ratio_p90"]
    est = estimate_scenario(_peft_like(write_scenario), {**PEFT_PINS, "micro_batch": 1})
    m = est.uncertainty.memory
    assert m.published_run_like_this is True and m.ratio_p10 == acc["memory"]["ratio_p10"]
    assert m.ratio_p90 == worst["ratio"] and m.total_p90 == round(est.memory.total * worst["ratio"])
    assert m.worst_run_like_this.case == PEFT_CASE and m.worst_run_like_this.ratio == worst["ratio"]
    assert est.uncertainty.risk.memory_ratio == worst["ratio"]  # planned at it too
    args = ["--gpu=RTX-4090", "--cards=2", "--zero=3", "--offload=all", "--micro-batch=1", "--checkpointing=full"]
    path = _peft_like(write_scenario, "cli.yaml")
    text = " ".join(run_cli("estimate", path, *args).stdout.split())
    assert f"memory: a measured run like this peaked {worst['ratio']:.2f}x its prediction ({PEFT_CASE})" in text
    assert f"planned at risk p90: peak x {worst['ratio']:g}" in text
    doc = json.loads(run_cli("estimate", path, *args, "--json").stdout)
    assert doc["uncertainty"]["memory"]["worst_run_like_this"] == {"ratio": worst["ratio"], "case": PEFT_CASE}
    # the same job without offload is in a cell with no such run: the overall band, no worst run
    other = estimate_scenario(_peft_like(write_scenario, "gpu.yaml"), {**PEFT_PINS, "gpu": "A100-80G",
                                                                        "offload": "none", "micro_batch": 1})
    assert other.uncertainty.memory.worst_run_like_this is None
    assert other.uncertainty.memory.ratio_p90 == acc["memory"]["ratio_p90"]


def test_the_solver_plans_at_the_cells_worst_run(catalog, tmp_path):
    """scenarios/70b-qlora.yaml on hosts with 128 GiB of RAM: with 20% headroom, micro-batch 1 on 2 x RTX 4090 with
    FSDP CPU offload fits at the overall p90 but not at the cell's worst run (PEFT's run of that kind); at the default
    headroom the 4090 plan is one that fits at that ratio. (With the default 32 GiB per card, 2 x 4090 cannot hold
    the offloaded 60 GiB NF4 base at all.)"""
    acc = catalog.calibration["accuracy"]
    worst, p90 = acc["memory_coverage"]["cell_high"][PEFT_CELL]["ratio"], acc["memory"]["ratio_p90"]
    doc = yaml.safe_load((REPO / "scenarios" / "70b-qlora.yaml").read_text())
    doc["allow"] = {**(doc.get("allow") or {}), "max_host_memory_gib": 128, "gpus": ["RTX-4090"]}
    path = tmp_path / "70b-qlora-128g.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    tight = tmp_path / "70b-qlora-128g-h20.yaml"
    tight.write_text(yaml.safe_dump({**doc, "headroom": 0.2}, sort_keys=False))
    edge = estimate_scenario(tight, {**PEFT_PINS, "micro_batch": 1})
    usable = edge.memory.capacity * 0.8
    assert edge.memory.total * p90 <= usable < edge.memory.total * worst and not edge.memory.fits
    usable = edge.memory.capacity * 0.95
    best = solve_scenario(path).best
    assert (best.plan.gpu, best.plan.offload.value, best.plan.zero_stage) == ("RTX-4090", "all", 3)
    assert best.memory.total * worst <= usable and best.uncertainty.memory.fits_p90
    assert best.uncertainty.risk.memory_ratio == worst
    sc, cat, _ = prepare(path)
    assert check_plan(sc, cat, best) == []  # the validator recomputes the fit at the plan's own ratio


@pytest.mark.parametrize("entry", [{"ratio": 0.0, "case": PEFT_CASE}, {"ratio": 1.6}, {"ratio": 1.6, "case": ""},
                                   {"ratio": 1.6, "case": PEFT_CASE, "cell": "x"}])
def test_the_calibration_schema_refuses_a_malformed_cell_high(catalog, entry):
    from pydantic import ValidationError

    from optimizer.inputs.schema_catalog import Accuracy

    acc = catalog.calibration["accuracy"]
    Accuracy.model_validate(acc)  # the shipped section is valid
    bad = {**acc, "memory_coverage": {**acc["memory_coverage"], "cell_high": {PEFT_CELL: entry}}}
    with pytest.raises(ValidationError):
        Accuracy.model_validate(bad)

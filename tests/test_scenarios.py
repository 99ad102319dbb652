"""Every shipped scenario solves, and the plans agree with the seed articles' field experience."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.schema import Status
from optimizer.solve.planner import estimate_scenario, solve_scenario

from .conftest import REPO, seventy_b

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


def test_there_are_at_least_eight_scenarios():
    assert len(SCENARIOS) >= 8


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_solves_or_explains(path: Path):
    result = solve_scenario(path)
    if result.best.status is Status.infeasible:
        assert result.relaxation is not None and result.relaxation.message
    else:
        plan, mem = result.best.plan, result.best.memory
        assert plan is not None and mem is not None and mem.fits
        assert plan.micro_batch * plan.grad_accum * plan.dp == result.scenario.global_batch


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_starts_with_its_user_story(path: Path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# User story:")


def _pinned(write_scenario, source: str, **plan) -> Path:
    doc = yaml.safe_load((REPO / "scenarios" / source).read_text(encoding="utf-8"))
    doc.pop("allow", None)
    doc["plan"] = plan
    return write_scenario(doc=doc)


def test_7b_qlora_fits_one_24gb_card(write_scenario):
    # seed 000: "QLoRA on a 7B model runs on one RTX 4090 24G, seq <= 2048, small batch"
    path = _pinned(write_scenario, "7b-qlora.yaml", gpu="RTX-4090", cards=1, micro_batch=1, checkpointing="full")
    est = estimate_scenario(path, {})
    assert est.memory.fits, est.memory


def test_7b_full_finetune_does_not_fit_one_24gb_card_without_offload(write_scenario):
    # seed 002: "a 24 GB RTX 4090 runs out of memory on full fine-tuning of a 7B model"
    path = _pinned(write_scenario, "7b-full.yaml", gpu="RTX-4090", cards=1, micro_batch=1, checkpointing="full",
                   zero_stage=0, offload="none")  # fmt: skip
    est = estimate_scenario(path, {})
    assert not est.memory.fits
    assert est.memory.total > 2 * est.memory.capacity  # 16 B/param x 7.6B = 122 GB of model states alone


def test_70b_full_finetune_needs_several_80gb_cards():
    result = solve_scenario(seventy_b())
    plan = result.best.plan
    assert plan is not None and plan.cards > 1
    assert result.best.memory.capacity >= 80 * 2**30


def test_70b_full_finetune_on_one_80gb_card_does_not_fit_without_offload(write_scenario):
    path = _pinned(write_scenario, "70b.yaml", gpu="A100-80G", cards=1, micro_batch=1, checkpointing="full",
                   zero_stage=3, offload="none")  # fmt: skip
    est = estimate_scenario(path, {})
    assert not est.memory.fits


def test_host_memory_limit_rules_out_plans_that_offload_more(write_scenario):
    doc = yaml.safe_load(seventy_b().read_text(encoding="utf-8"))  # nodes with 2 TiB stated
    unlimited = solve_scenario(seventy_b()).best
    need_gib = unlimited.memory.cpu_offload / 2**30
    assert need_gib > 64  # the cheapest plan offloads optimizer states to the host

    def limited(gib: int):
        doc["allow"]["max_host_memory_gib"] = gib
        return solve_scenario(write_scenario(f"host-{gib}.yaml", doc=doc)).best

    # a limit just above what the cheapest plan needs changes nothing
    roomy = limited(math.ceil(need_gib) + 1)
    assert roomy.plan == unlimited.plan
    # just below, that plan is ruled out: another plan within the limit, or none at all (never the same plan)
    tight = limited(math.floor(need_gib) - 1)
    assert tight.plan != unlimited.plan
    assert tight.plan is None or tight.memory.cpu_offload <= (math.floor(need_gib) - 1) * 2**30


def test_the_host_memory_cap_binds_on_offers_that_state_their_ram(tmp_path: Path):
    # lambda's 8 x H100 instance states 1.8 TB of RAM and the 70B plan offloads ~1,577 GiB to it; a user who caps
    # offloading at 1,000 GiB per node must not get that plan (the offer's own figure does not lift the user's cap)
    doc = yaml.safe_load((REPO / "scenarios" / "70b.yaml").read_text(encoding="utf-8"))
    doc["catalog"] = "lambda"
    path = tmp_path / "70b-lambda.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    plain = solve_scenario(path).best
    assert plain.memory is not None and plain.offer is not None and plain.offer.host_ram_rule is None  # stated RAM
    assert plain.memory.cpu_offload > 1000 * 2**30
    doc["allow"]["max_host_memory_gib"] = 1000
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    capped = solve_scenario(path).best
    assert capped.plan is None or capped.memory.cpu_offload <= 1000 * 2**30

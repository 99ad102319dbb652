"""Offers as rented machines: host RAM, usable memory, P2P, disks, start-up by nodes, requirements, checklist."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import Status
from optimizer.models import hosts, overheads
from optimizer.solve.planner import estimate_scenario, solve_scenario
from optimizer.solve.validator import check_plan

from .conftest import REPO, scenario_doc

SRC = {"source": "test offer written for this test", "as_of": "2026-12-01"}


def offer(oid: str, gpu: str, price: float, **extra: Any) -> dict[str, Any]:
    return {"id": oid, "provider": "TestCloud", "gpu": gpu, "cards_per_node": 8, "max_nodes": 1,
            "prices": {"hour": {"amount": price, **SRC}}, **extra}  # fmt: skip


def write_offers(tmp_path: Path, offers: list[dict[str, Any]], name: str = "offers.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"schema_version": 1, "currency": "USD", "offers": offers}, sort_keys=False))
    return path


def write(tmp_path: Path, doc: dict[str, Any], name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------------ host RAM


def _seventy_b(offers_file: Path) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "scenarios" / "70b.yaml").read_text())
    return {**doc, "catalog": str(offers_file), "budget": None, "deadline_hours": None,
            "allow": {"max_cards": 8}}  # fmt: skip


def test_70b_offload_plan_never_exceeds_the_offers_host_ram(tmp_path):
    # the same A100-80G node, cheap with 1 TiB of RAM, dear with 2 TiB: the 70B ZeRO-3 optimizer offload needs
    # ~1.6 TB per node, so the cheap node can only take plans that offload nothing
    small = offer("small-ram-a100", "A100-80G", 1.0, host={"ram_gib": 1024, **SRC})
    large = offer("large-ram-a100", "A100-80G", 1.5, host={"ram_gib": 2048, **SRC})
    path = write(tmp_path, _seventy_b(write_offers(tmp_path, [small, large])))
    best = solve_scenario(path).best
    assert best.plan is not None and best.memory is not None and best.offer is not None
    assert best.memory.cpu_offload > 1024 * 2**30  # the optimum needs more than the small node has
    assert best.plan.offer == "large-ram-a100"
    assert best.offer.host_ram_bytes == 2048 * 2**30
    assert not any(r.startswith("host RAM") for r in best.requirements)


def test_unknown_host_ram_is_the_default_rule_not_unlimited(tmp_path):
    # no RAM stated: the calibration's fallback (32 GiB per card, 256 GiB for 8 cards) binds, so the 70B ZeRO-3
    # optimizer offload (~1.6 TB per node) has no plan on 8 cards, and the explanation names the host RAM
    path = write(tmp_path, _seventy_b(write_offers(tmp_path, [offer("unknown-ram-a100", "A100-80G", 1.0)])))
    result = solve_scenario(path)
    assert result.best.plan is None and result.relaxation is not None
    msg = result.relaxation.message
    assert "host RAM" in msg and "on unknown-ram-a100, whose node has 256 GiB" in msg
    assert "allow.max_host_memory_gib" in msg  # the user's way to state the RAM their nodes have


def test_scenario_host_ram_replaces_the_default_and_stays_a_requirement(tmp_path):
    doc = _seventy_b(write_offers(tmp_path, [offer("unknown-ram-a100", "A100-80G", 1.0)]))
    doc["allow"]["max_host_memory_gib"] = 2000
    best = solve_scenario(write(tmp_path, doc)).best
    assert best.plan is not None and best.offer is not None and best.memory is not None
    ranks = best.plan.cards // best.plan.nodes  # training processes per node
    assert best.offer.host_ram_bytes == (2000 + 4 * ranks) * 2**30  # the figure + host_ram_per_rank_gib x ranks
    assert "allow.max_host_memory_gib 2000" in (best.offer.host_ram_rule or "")
    lines = [r for r in best.requirements if r.startswith("host RAM")]
    assert len(lines) == 1 and "unknown-ram-a100" in lines[0]
    need_gib = (best.memory.cpu_offload + ranks * 4 * 2**30) / 2**30  # offload + ranks x host_ram_per_rank_gib
    assert f"{need_gib:,.0f} GiB" in lines[0]


def test_autodl_default_is_its_documented_ram_per_gpu(catalog):
    # catalogs/calibration.yaml: AutoDL allocates RAM per GPU (e.g. 32 GB = 29.8 GiB); a 4-card node has 4 x that
    seed = next(o for o in catalog.offers if o.id == "seed002-a100-80g")
    assert not hosts.ram_stated(seed)
    ram = hosts.host_ram_bytes([seed], np.array([0]), np.array([4]), catalog.calibration["hosts"])
    assert ram.tolist() == [pytest.approx(4 * 29.8 * 2**30)]
    other = next(o for o in catalog.offers if o.id == "gpuindex-a800-80g")  # no provider rule: the fallback
    assert hosts.host_ram_bytes([other], np.array([0]), np.array([8]), catalog.calibration["hosts"]).tolist() == [
        8 * 32 * 2**30]


def test_70b_on_cn_has_no_plan_over_its_nodes_host_ram(tmp_path):
    # before the default rule, this chose 4 x A100-80G on seed002 (AutoDL) asking for 1,593 GiB of RAM per node;
    # AutoDL's docs give ~32 GB per GPU (29.8 GiB x 4 = 119 GiB), and no cn offer states more
    doc = yaml.safe_load((REPO / "scenarios" / "70b.yaml").read_text(encoding="utf-8"))
    doc["catalog"] = "cn"
    path = tmp_path / "70b-cn.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = solve_scenario(path)
    assert result.best.plan is None and result.relaxation is not None
    assert "need more host RAM than their nodes have" in result.relaxation.message
    old = {"gpu": "A100-80G", "offer": "seed002-a100-80g", "cards": 4, "zero_stage": 3, "offload": "optimizer",
           "micro_batch": 2, "checkpointing": "full"}  # fmt: skip
    est = estimate_scenario(path, old)
    assert est.status is Status.infeasible and est.memory is not None and est.memory.host_ram_fits is False
    assert est.memory.total <= est.memory.capacity  # its prediction fits the cards; host RAM is short too
    assert est.offer is not None and est.offer.host_ram_bytes == pytest.approx(4 * 29.8 * 2**30, abs=1)
    assert "default 29.8 GiB per card (autodl.com/docs/env" in (est.offer.host_ram_rule or "")


def test_shipped_70b_plan_stays_within_its_nodes_stated_host_ram():
    # every built-in catalog: the plan's offload fits the RAM its offer states (or the default rule's)
    result = solve_scenario(REPO / "scenarios" / "70b.yaml")
    best = result.best
    assert best.plan is not None and best.offer is not None and best.memory is not None
    assert best.memory.cpu_offload <= best.offer.host_ram_bytes


def test_validator_rejects_a_plan_over_the_stated_host_ram(tmp_path, catalog):
    # estimate the offloading plan on a node whose stated RAM is too small: it must not fit, and the validator agrees
    small = offer("small-ram-a100", "A100-80G", 1.0, host={"ram_gib": 512, **SRC})
    path = write(tmp_path, _seventy_b(write_offers(tmp_path, [small])))
    pins = {"gpu": "A100-80G", "cards": 8, "zero_stage": 3, "offload": "optimizer", "micro_batch": 1,
            "checkpointing": "full"}  # fmt: skip
    est = estimate_scenario(path, pins)
    assert est.status is Status.infeasible and est.memory is not None and est.memory.host_ram_fits is False
    assert est.memory.fits and est.memory.cpu_offload > 512 * 2**30


def test_per_card_ram_scales_with_the_cards_rented_in_the_node():
    lam = offer("x", "H100-SXM", 1.0, host={"ram_gib_per_card": 225, **SRC})
    from optimizer.inputs.schema_catalog import Offer

    o = Offer.model_validate({**lam, "currency": "USD"})
    ram = hosts.host_ram_bytes([o], np.array([0, 0]), np.array([1, 8]))
    assert ram.tolist() == [225 * 2**30, 8 * 225 * 2**30]


# ------------------------------------------------------------------------------------------------ usable memory


def test_capacity_is_the_usable_not_the_nominal_memory(catalog):
    h100 = catalog.gpus["H100-SXM"]
    o = next(o for o in catalog.offers if o.gpu == "H100-SXM" and o.usable_memory_mib is None)
    assert h100.usable_memory_mib is not None and h100.usable_memory_mib < h100.memory_gib * 1024
    assert hosts.capacity_bytes(h100, o) == int(h100.usable_memory_mib * 2**20)
    stated = o.model_copy(update={"usable_memory_mib": 80000.0})
    assert hosts.capacity_bytes(h100, stated) == 80000 * 2**20


def test_fit_is_judged_against_the_offers_usable_memory_not_the_nominal_size(tmp_path):
    # one configuration well below the nominal 80 GiB; an offer whose usable size is 0.1% above its peak fits it,
    # one 0.1% below does not, although both cards are nominally the same H100 SXM
    pins = {"gpu": "H100-SXM", "cards": 1, "micro_batch": 1, "checkpointing": "full"}
    p90 = load_catalog().calibration["accuracy"]["memory"]["ratio_p90"]
    fits = {}
    for name, factor in (("above", 1.001), ("below", 0.999)):
        probe = write(tmp_path, scenario_doc(headroom=0.0, catalog=str(write_offers(
            tmp_path, [offer(f"probe-{name}", "H100-SXM", 1.0)], f"p-{name}.yaml"))), f"p-{name}.s.yaml")  # fmt: skip
        est = estimate_scenario(probe, pins)
        total = est.memory.total  # type: ignore[union-attr]
        ratio = est.uncertainty.risk.memory_ratio  # type: ignore[union-attr]  # the plan's band at the risk p90
        assert ratio >= p90 and total * ratio < 80 * 2**30 * 0.9
        o = offer(f"usable-{name}", "H100-SXM", 1.0, usable_memory_mib=total * ratio / 2**20 * factor)
        path = write(tmp_path, scenario_doc(headroom=0.0, catalog=str(write_offers(tmp_path, [o], f"{name}.yaml"))),
                     f"{name}.s.yaml")  # fmt: skip
        fits[name] = estimate_scenario(path, pins).memory.fits  # type: ignore[union-attr]
    assert fits == {"above": True, "below": False}


# ------------------------------------------------------------------------------------------------ P2P


def _zero3_offload_14b(tmp_path: Path, gpu: str) -> float:
    o = offer(f"nop2p-{gpu.lower()}", gpu, 1.0, nvlink=False, p2p=False)
    doc = scenario_doc(model="Qwen2.5-14B", method="full", seq_len=2048, global_batch=64, lora=None,
                       catalog=str(write_offers(tmp_path, [o], f"{gpu}.yaml")))  # fmt: skip
    path = write(tmp_path, doc, f"{gpu}.scenario.yaml")
    pins = {"gpu": gpu, "cards": 8, "zero_stage": 3, "offload": "optimizer", "micro_batch": 1,
            "checkpointing": "full"}  # fmt: skip
    est = estimate_scenario(path, pins)
    assert est.time is not None
    return est.time.step_seconds


def test_3090_and_4090_hosts_without_p2p_differ_by_at_most_their_compute_ratio(tmp_path, catalog):
    # both use the same PCIe 4.0 host path, so the 4090 can only be faster by its compute advantage (peak x fitted
    # efficiency), never slower, and the 3090 can no longer come out several times faster (issue 13)
    eff = catalog.calibration["timing"]["efficiency"]
    g3, g4 = catalog.gpus["RTX-3090"], catalog.gpus["RTX-4090"]
    assert g3.pcie_gb_per_s == g4.pcie_gb_per_s
    compute_ratio = (g4.bf16_tflops * eff[g4.arch]) / (g3.bf16_tflops * eff[g3.arch])
    ratio = _zero3_offload_14b(tmp_path, "RTX-3090") / _zero3_offload_14b(tmp_path, "RTX-4090")
    assert 1.0 <= ratio <= compute_ratio * 1.0001, (ratio, compute_ratio)


def test_offer_p2p_overrides_the_gpu_default(catalog):
    a100 = catalog.gpus["A100-80G"]
    o = next(o for o in catalog.offers if o.gpu == "A100-80G")
    assert hosts.p2p(a100, o) is True
    assert hosts.p2p(a100, o.model_copy(update={"p2p": False})) is False
    rtx3090 = catalog.gpus["RTX-3090"]
    shipped = next(o for o in catalog.offers if o.gpu == "RTX-3090" and o.p2p is None)
    assert hosts.p2p(rtx3090, shipped) is False  # bridge-less 3090 servers: no P2P unless the offer says so


# ------------------------------------------------------------------------------------------------ overheads


def test_checkpoint_bytes_are_weights_master_and_moments_per_trainable_parameter(catalog):
    # 70.6e9 parameters x (2 + 4 + 8) bytes = 988 GB: the ~1 TB 70B checkpoint with optimizer states
    hosts_cal = catalog.calibration["hosts"]
    assert hosts_cal["checkpoint_bytes_per_param"]["adamw"] == 14
    save = overheads.save_seconds(np.array([988e9]), np.array([2]), np.array([1e9]))
    assert save.tolist() == [494.0]  # two nodes write half each at 1 GB/s


def test_startup_grows_with_the_node_count():
    s = overheads.startup_seconds(np.array([1, 2, 4, 16]), 600.0, 120.0)
    assert s.tolist() == [600.0, 720.0, 840.0, 1080.0]


def test_startup_writes_the_16_bit_model_to_each_nodes_disk(catalog):
    # 2 P bytes at the disk's write rate on top of the fixed start-up: Llama-3.1-405B (405.9 B params, 811.7 GB) on
    # an NVMe node at 1 GB/s adds 812 s, an 8B model 16 s; the 600 s had been all a 405B job paid to start
    from tests.memory_builders import job

    big, small = job(catalog.model("Llama-3.1-405B"), "qlora"), job(catalog.model("Llama-3.1-8B"), "lora")
    fast = np.array([1e9])
    assert overheads.model_write_seconds(big, fast)[0] == pytest.approx(2 * big.arch.total_params / 1e9)
    assert overheads.model_write_seconds(big, fast)[0] > 800 > 20 > overheads.model_write_seconds(small, fast)[0]
    assert overheads.model_write_seconds(big, np.array([0.5e9]))[0] == pytest.approx(
        2 * overheads.model_write_seconds(big, fast)[0])


def test_a_405b_job_starts_later_than_an_8b_one(write_scenario):
    # FSDP: under DeepSpeed ZeRO-3 the whole NF4 405B (about 210 GiB) would first load on each GPU
    doc = {"method": "qlora", "catalog": "lambda", "global_batch": 16, "data": {"tokens": 1e6, "epochs": 1},
           "training": {"framework": "hf", "sharding": "fsdp", "optimizer": "adamw", "attention": "flash"}}
    small = solve_scenario(write_scenario("s.yaml", model="Llama-3.1-8B", **doc)).best.time
    big = solve_scenario(write_scenario("b.yaml", model="Llama-3.1-405B", **doc)).best.time
    assert big.startup_hours - small.startup_hours > 0.15  # at least 795 GB more at the fastest disk rate (1 GB/s)


def test_faster_disk_saves_faster_and_shortens_the_job(tmp_path):
    kinds = {}
    for kind in ("hdd", "nvme"):
        o = offer(f"disk-{kind}", "A100-80G", 1.0, host={"local_disk_kind": kind, **SRC})
        doc = scenario_doc(method="full", lora=None, catalog=str(write_offers(tmp_path, [o], f"{kind}.yaml")))
        est = estimate_scenario(write(tmp_path, doc, f"{kind}.s.yaml"), {"gpu": "A100-80G", "cards": 1,
                                                                          "micro_batch": 1})  # fmt: skip
        kinds[kind] = est.time.hours  # type: ignore[union-attr]
    assert kinds["nvme"] < kinds["hdd"]


# ------------------------------------------------------------------------------------------------ JSON, checklist


def test_plan_json_carries_offer_capacity_interruptions_requirements_and_checklist(catalog):
    result = solve_scenario(REPO / "scenarios" / "14b-lora.yaml")
    doc = result.best.model_dump(mode="json")
    assert set(doc["offer"]) >= {"id", "provider", "host_ram_bytes", "vcpus", "local_disk_bytes",
                                 "usable_bytes_per_card", "p2p", "source"}  # fmt: skip
    t = doc["time"]  # on demand: the expected hardware failures cost little, and the parts add up to the hours
    assert doc["plan"]["capacity"] == "on_demand" and 0.0 < t["interruption_hours"] < 0.01 * t["hours"]
    parts = t["train_hours"] + t["checkpoint_hours"] + t["startup_hours"] + t["interruption_hours"]
    assert parts == pytest.approx(t["hours"], abs=1e-5) and t["checkpoint_saves"] >= 1
    assert all(isinstance(r, str) and "\n" not in r for r in doc["requirements"])
    checks = {c["check"] for c in doc["checklist"]}
    assert {"GPU memory per card", "host-to-device bandwidth", "device-to-device bandwidth",
            "memory used in the first steps", "step time"} <= checks  # fmt: skip
    assert check_plan(result.scenario, load(result), result.best) == []


def load(result: Any) -> Any:
    from optimizer.solve.planner import prepare

    return prepare(REPO / "scenarios" / "14b-lora.yaml")[1]


def test_checklist_expects_what_the_plan_was_computed_with(tmp_path):
    o = offer("check-a100", "A100-80G", 1.0, usable_memory_mib=81000.0)
    path = write(tmp_path, scenario_doc(catalog=str(write_offers(tmp_path, [o]))))
    est = estimate_scenario(path, {"gpu": "A100-80G", "cards": 4, "micro_batch": 1, "zero_stage": 2})
    by = {c.check: c for c in est.checklist}
    assert by["GPU memory per card"].expected == 81000
    assert by["memory used in the first steps"].expected == round(est.memory.total / 2**20)  # type: ignore[union-attr]
    assert by["step time"].expected == pytest.approx(est.time.step_seconds, abs=1e-3)  # type: ignore[union-attr]
    assert "all_reduce_perf" in by["all-reduce bus bandwidth over 4 GPUs"].command


def test_checklist_expects_nccl_tests_busbw_without_peer_to_peer(tmp_path, catalog):
    """Cards without P2P: the expectation is nccl-tests' host-staged rate (PCIe x 0.51 / cards), not the fitted
    training link (x 0.227), which a host delivering half of a healthy one's would pass."""
    o = offer("check-4090", "RTX-4090", 1.0)
    path = write(tmp_path, scenario_doc(catalog=str(write_offers(tmp_path, [o]))))
    est = estimate_scenario(path, {"gpu": "RTX-4090", "cards": 4, "micro_batch": 1, "zero_stage": 2})
    (row,) = [c for c in est.checklist if c.check.startswith("all-reduce")]
    gpu = catalog.gpus["RTX-4090"]
    assert not gpu.p2p
    eff = catalog.calibration["hosts"]["checklist"]["host_staged_busbw_efficiency"]
    assert row.expected == round(gpu.pcie_gb_per_s * eff / 4, 2)
    assert row.expected > 2 * gpu.pcie_gb_per_s * catalog.calibration["timing"]["link_efficiency"]["host"] / 4


@pytest.mark.parametrize(
    ("cards", "tp", "pp", "check", "command"),
    [  # 8 cards a node; the data-parallel group is cards / (tp x pp), over every node it spans
        (8, 1, 1, "over 8 GPUs", "all_reduce_perf -b 1G -e 1G -g 8 (nccl-tests)"),
        (8, 4, 1, "over 2 GPUs (one of the plan's 4 data-parallel groups)", "all_reduce_perf -b 1G -e 1G -g 2 "),
        (8, 2, 2, "over 2 GPUs (one of the plan's 4 data-parallel groups)", "all_reduce_perf -b 1G -e 1G -g 2 "),
        (8, 4, 2, None, None),  # dp 1: no data-parallel all-reduce to measure
        (16, 1, 1, "over 16 GPUs", "mpirun -np 16 all_reduce_perf -b 1G -e 1G -g 1 (nccl-tests; 8 ranks per node on 2"),
        (16, 4, 1, "over 4 GPUs (one of the plan's 4", "mpirun -np 4 all_reduce_perf -b 1G -e 1G -g 1 (nccl-tests; 2 "),
        (32, 8, 2, "over 2 GPUs (one of the plan's 16", "mpirun -np 2 all_reduce_perf -b 1G -e 1G -g 1 (nccl-tests; "),
    ],
)
def test_checklist_allreduce_command_measures_the_group_its_line_names(tmp_path, cards, tp, pp, check, command):
    # tp 4 x dp 2 on one node once said "over 2 GPUs" and printed -g 8 (all eight cards), and pp 2 counted as dp
    o = offer("check-h100", "H100-SXM", 1.0, max_nodes=4, inter_node_gb_per_s=50.0)
    doc = scenario_doc(catalog=str(write_offers(tmp_path, [o])), model="Llama-3.1-70B", global_batch=64,
                       training={"framework": "nemo", "optimizer": "adamw", "attention": "flash"})  # fmt: skip
    est = estimate_scenario(write(tmp_path, doc), {"gpu": "H100-SXM", "cards": cards, "tp": tp, "pp": pp,
                                                   "micro_batch": 1, "checkpointing": "full"})  # fmt: skip
    rows = [c for c in est.checklist if c.check.startswith("all-reduce")]
    if check is None:
        assert rows == []
        return
    assert len(rows) == 1 and rows[0].check.startswith(f"all-reduce bus bandwidth {check}")
    assert rows[0].command.startswith(command)
    if cards > 8:  # the ranks of one group over the nodes it spans
        dp = cards // (tp * pp)
        assert f"{dp // min(cards // 8, dp)} rank" in rows[0].command


# ------------------------------------------------------------------------------------------------ owned machines


def _owned_runs(tmp_path: Path, **owned: Any) -> list:
    from optimizer.portfolio.plan import build_problem

    # full fine-tuning of an 8B model on one owned 24 GB card needs its states offloaded: ~120 GiB of host RAM
    offers = write_offers(tmp_path, [offer("rent-a100", "A100-80G", 50.0, host={"ram_gib": 2048, **SRC})])
    job = write(tmp_path, scenario_doc(catalog=str(offers), method="full", lora=None), "job.yaml")
    pf = tmp_path / "pf.yaml"
    pf.write_text(yaml.safe_dump({"currency": "USD", "horizon_days": 30, "catalog": str(offers),
                                  "electricity_per_kwh": 0.1,
                                  "owned": [{"gpu": "RTX-4090", "cards": 1, "power_w": 450, **owned}],
                                  "jobs": [{"name": "j", "scenario": str(job), "release_day": 0, "due_day": 29}]}))
    _, _, problem, spaces, _ = build_problem(pf)
    return [(r, spaces[0].space.cand.mem["cpu_offload"][r.plan]) for r in problem.occurrences[0].runs
            if r.kind == "pool"]


def test_an_owned_machine_without_stated_ram_gets_the_default_rule(tmp_path):
    # the owned 4090 box states no RAM: 32 GiB per card (hosts.host_ram_default fallback) cannot hold the offload
    assert _owned_runs(tmp_path) == []
    runs = _owned_runs(tmp_path, host_ram_gib=256)  # stated: the owned card runs it, offloading
    assert runs and all(off > 32 * 2**30 for _, off in runs)


def _a100_zero3(tmp_path: Path, nvlink: bool | None) -> Any:
    o = offer(f"a100-nvlink-{nvlink}".lower(), "A100-80G", 1.0, nvlink=nvlink)
    doc = scenario_doc(model="Qwen2.5-14B", method="full", seq_len=2048, global_batch=64, lora=None,
                       catalog=str(write_offers(tmp_path, [o], f"{nvlink}.yaml")))  # fmt: skip
    path = write(tmp_path, doc, f"{nvlink}.scenario.yaml")
    pins = {"gpu": "A100-80G", "cards": 8, "zero_stage": 3, "offload": "none", "micro_batch": 1,
            "checkpointing": "full"}  # fmt: skip
    return estimate_scenario(path, pins)


def test_an_offer_that_does_not_say_sxm_or_pcie_is_planned_as_pcie_and_listed_to_confirm(tmp_path):
    """nvlink: null (the source does not say): the collectives are priced as on PCIe boards, never on an NVLink the
    rented machine may not have, and the plan asks the provider (AutoDL's A100s: 3x the hours on PCIe)."""
    unknown, pcie, sxm = (_a100_zero3(tmp_path, v) for v in (None, False, True))
    assert unknown.time.step_seconds == pcie.time.step_seconds > sxm.time.step_seconds
    assert any(r.startswith("NVLink: confirm") for r in unknown.requirements)
    assert not any(r.startswith("NVLink") for r in pcie.requirements + sxm.requirements)


def test_on_demand_checkpoints_at_the_young_daly_interval_for_hardware_failures(tmp_path, catalog):
    """Without training.checkpoint_every_hours the interval is sqrt(2 x save x M), M = 50,677 GPU-hours (Llama 3's
    unexpected interruptions) / cards: 70B full fine-tuning on 8 H100s saves its 988 GB once, at the end, instead of
    every 2 h (17 saves, 10 h of the README's 44.4 h job)."""
    est = solve_scenario(REPO / "scenarios" / "70b.yaml").best
    t = est.time
    assert t is not None and est.plan is not None
    save_h = t.checkpoint_hours / t.checkpoint_saves
    mtbi_h = catalog.calibration["hosts"]["on_demand_gpu_mtbi_hours"] / est.plan.cards
    assert t.checkpoint_interval_hours == pytest.approx(math.sqrt(2 * save_h * mtbi_h), rel=1e-4)
    assert t.checkpoint_interval_hours > t.train_hours and t.checkpoint_saves == 1
    restart_h = t.startup_hours + save_h
    assert t.interruption_hours == pytest.approx(t.train_hours / mtbi_h * (restart_h + t.train_hours / 2), rel=1e-4)
    assert est.plan is not None
    doc = yaml.safe_load((REPO / "scenarios" / "70b.yaml").read_text())
    doc["training"] = {**doc["training"], "checkpoint_every_hours": 2}
    pinned = solve_scenario(write(tmp_path, doc, "70b-2h.yaml")).best.time
    assert pinned is not None and pinned.checkpoint_interval_hours == 2
    assert pinned.checkpoint_saves == math.floor(pinned.train_hours / 2) + 1


def test_the_launch_files_save_at_the_interval_the_plan_priced():
    """HF's Trainer saves every 500 steps unless told: the files say save_steps = the plan's interval in steps."""
    result = solve_scenario(REPO / "scenarios" / "70b.yaml")
    t, launch = result.best.time, result.launch
    assert t is not None and launch is not None
    every = min(t.steps, int(t.checkpoint_interval_hours * 3600 // t.step_seconds))
    args = launch["training_arguments"]
    assert args["save_strategy"] == "steps" and args["save_steps"] == every == t.steps
    assert launch["llamafactory.yaml"]["save_steps"] == every
    assert any(f"a save every {every} optimizer steps" in n for n in launch["notes"])


def test_the_step_time_stop_line_is_the_plans_own_band():
    """A plan without peer-to-peer has the published no-P2P runs' band (they ran up to 1.9x the prediction): its
    stop line is there, not at the group's 1.3x, which would stop the run where the band expects it to be."""
    pins = {"gpu": "RTX-4090", "cards": 4, "zero_stage": 3, "offload": "none", "micro_batch": 1,
            "checkpointing": "full"}  # fmt: skip
    est = estimate_scenario(REPO / "scenarios" / "8b-full-torchtune.yaml", pins)
    step = next(c for c in est.checklist if c.check == "step time")
    ut = est.uncertainty.time  # type: ignore[union-attr]
    assert ut.no_peer_to_peer and ut.ratio_p90 > 1.5
    assert f"above {est.time.step_seconds * ut.ratio_p90:,.2f} s" in step.stop_if  # type: ignore[union-attr]


def test_a_qlora_plans_disk_holds_the_16_bit_download():
    """The 70B QLoRA base is downloaded as published (bf16, 141 GB) and quantised as it loads: the disk line asked
    for 41 GB (the 4-bit size), which a 50 GB rental disk passes and the download then fills."""
    est = solve_scenario(REPO / "scenarios" / "70b-qlora.yaml").best
    line = next(r for r in est.requirements if r.startswith("disk"))
    gb = float(line.split(" GB of local disk")[0].split()[-1].replace(",", ""))
    assert gb >= 70.55e9 * 2 / 1e9


def test_a_job_shorter_than_one_step_saves_at_most_once_per_step_and_says_so(tmp_path):
    """global_batch x seq_len above the data: one step of 4.1e10 tokens; the saves were counted by the hour (1,084
    of them inside one step) and nothing said the data was rounded up to a whole step."""
    doc = scenario_doc(global_batch=10_000_000, data={"tokens": 1.0e8, "epochs": 1}, catalog="us")
    est = solve_scenario(write(tmp_path, doc)).best
    assert est.time is not None and est.time.steps == 1 and est.time.checkpoint_saves == 1
    assert any("one optimizer step takes global_batch x seq_len" in n for n in est.notes)


def test_the_risk_line_says_over_when_the_peak_at_risk_is_over(tmp_path):
    from optimizer.report.plan import uncertainty_lines

    est = estimate_scenario(REPO / "scenarios" / "7b-lora.yaml", {"gpu": "RTX-3060", "cards": 1, "micro_batch": 8})
    assert est.memory is not None and not est.memory.fits
    assert " OVER " in uncertainty_lines(est)[0] and " within " not in uncertainty_lines(est)[0]


def test_an_offers_usable_memory_above_its_card_is_a_one_line_error(tmp_path, run_cli):
    # 200,000 MiB on an H100 passed catalog validate and planned "151.7 GiB ... 78% of 195.3 GiB" on an 80 GB card
    big = write_offers(tmp_path, [offer("big", "H100-SXM", 2.0, usable_memory_mib=200000)], "big.yaml")
    done = run_cli("catalog", "validate", big)
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "offers[0].usable_memory_mib: 200,000 MiB is more than a H100-SXM holds" in done.stderr
    fine = write_offers(tmp_path, [offer("fine", "H100-SXM", 2.0, usable_memory_mib=81559)], "fine.yaml")
    assert run_cli("catalog", "validate", fine).exit_code == 0

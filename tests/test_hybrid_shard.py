"""Hybrid sharding (HSDP): ZeRO-3 sharded inside each node and replicated across nodes, as a solver choice.

Numbers in comments are worked by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from optimizer.models import comm, memory
from optimizer.solve.planner import prepare, solve_scenario
from optimizer.solve.validator import check_plan
from tests.conftest import scenario_doc, timing_inputs

from .test_offers_hosts import SRC, write, write_offers

FSDP = {"framework": "hf", "sharding": "fsdp", "optimizer": "adamw", "attention": "flash"}
FULL_FSDP = {"method": "full", "lora": None, "training": FSDP}
NO_LATENCY = {"collective_latency_s": {"intra": 0.0, "network": 0.0}}


def _two_rows(catalog: Any, **changes: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """16 A100-80G over two nodes at ZeRO-3: row 0 full sharding (16 ranks), row 1 hybrid (8 ranks per shard)."""
    job, cfg, hw, k = timing_inputs(catalog, "A100-80G", [16, 16], zero_stage=3, **{**FULL_FSDP, **changes})
    assert hw.nodes.tolist() == [2, 2]
    return job, replace(cfg, shard=np.array([16, 8])), hw, k


def test_hybrid_rows_keep_a_node_shard_of_the_model_states(catalog):
    # Sharding over 8 instead of 16 ranks doubles each rank's shard of weights, gradients and optimizer states
    # (every ZeRO-3 state is P x bytes / N): the ratio is exactly 16 / 8 = 2. Global batch 16: no accumulation, so
    # the HF Trainer's unsharded accumulation buffer (no_sync) does not apply.
    job, cfg, _, _ = _two_rows(catalog, global_batch=16)
    assert cfg.grad_accum.tolist() == [1, 1]
    k = catalog.calibration["memory"]
    for part in (memory.weight_bytes, memory.gradient_bytes, memory.optimizer_bytes):
        full, hybrid = part(job, cfg, k).astype(float)
        assert hybrid == pytest.approx(2 * full, rel=1e-9), part.__name__


def test_hybrid_collectives_stay_in_the_node_and_all_reduce_a_shard_across_nodes(catalog):
    # Llama-3.1-8B full, P = P_train = 8.03e9, 32 layers; latencies 0. Links set by hand: intra 100 GB/s, the node's
    # NICs 16 GB/s in all (2 GB/s per GPU). grads = 2 P = 16.06e9 B; base weights 2 P = 16.06e9 B.
    # Full sharding over 16 ranks on two nodes (FSDP: the node aggregate, min(100, 16) = 16 GB/s):
    #   scatter 15/16 x 16.06e9 / 16e9 = 0.941 s; gather 2 x 15/16 x 16.06e9 / 16e9 = 1.882 s; total 2.823 s
    # Hybrid, 8 ranks per shard inside the node (100 GB/s): scatter 7/8 x 16.06e9 / 1e11 = 0.1405 s, gather 0.2810 s;
    #   replicas r = 2, each of the 8 rings gets 16 / 8 = 2 GB/s: 2 x 1/2 x (16.06e9 / 8) / 2e9 = 1.0037 s;
    #   total 1.4252 s.
    job, cfg, hw, k = _two_rows(catalog)
    hw = replace(hw, intra_bytes_per_s=np.full(2, 1e11), inter_bytes_per_s=np.full(2, 16e9))
    p = float(job.arch.total_params)
    assert p == pytest.approx(8.03e9, rel=2e-3)
    got = comm.zero_seconds(job, cfg, hw, {**k, **NO_LATENCY})
    full = (15 / 16) * 2 * p / 16e9 * 3
    hybrid = (7 / 8) * 2 * p / 1e11 * 3 + (2 * p / 8) / 2e9
    assert got.tolist() == pytest.approx([full, hybrid], rel=1e-9)
    assert got[0] == pytest.approx(2.823, rel=2e-3) and got[1] == pytest.approx(1.4252, rel=2e-3)


def test_hybrid_rows_pay_one_node_ring_latency_plus_a_cross_node_all_reduce_per_layer(catalog):
    # With every bandwidth infinite only latency is left. Full sharding: 3 collectives x 32 layers, each a ring over 16
    # ranks on 2 nodes: (16 - 1 - 2) alpha_intra + 2 alpha_net. Hybrid: the same 3 x 32 over 8 ranks in one node,
    # 7 alpha_intra, plus 32 all-reduces over 2 replicas on 2 nodes (min of ring 2 x (0 + 2 alpha_net) and tree
    # 2 x (0 + log2(2) alpha_net) = 2 alpha_net).
    job, cfg, hw, k = _two_rows(catalog)
    hw = replace(hw, intra_bytes_per_s=np.full(2, np.inf), inter_bytes_per_s=np.full(2, np.inf))
    a, n = 3e-6, 2e-5
    got = comm.zero_seconds(job, cfg, hw, {**k, "collective_latency_s": {"intra": a, "network": n}})
    assert got.tolist() == pytest.approx([96 * (13 * a + 2 * n), 96 * 7 * a + 32 * 2 * n], rel=1e-9)


def _slow_network_offers(tmp_path: Path) -> Path:
    # 8 x A100-80G nodes with NVLink and a slow 1 GB/s per GPU between nodes, up to 4 nodes (stated RAM: no offload
    # limit from the default rule)
    o = {"id": "slow-net-a100", "provider": "TestCloud", "gpu": "A100-80G", "cards_per_node": 8, "max_nodes": 4,
         "nvlink": True, "inter_node_gb_per_s": 1.0, "prices": {"hour": {"amount": 2.0, **SRC}},
         "host": {"ram_gib": 2048, **SRC}}  # fmt: skip
    return write_offers(tmp_path, [o])


def _scenario(tmp_path: Path, **changes: Any) -> Path:
    # Qwen2.5-14B full: ZeRO-2 keeps whole fp32 weights (59 GB) and does not fit an 80 GB card at p90, so the
    # choice is between ZeRO-3 over all 32 ranks and ZeRO-3 inside each node
    doc = scenario_doc(**{**FULL_FSDP, "model": "Qwen2.5-14B", "data": {"tokens": 2.0e8, "epochs": 1},
                          "global_batch": 64, "catalog": str(_slow_network_offers(tmp_path)), "plan": {"cards": 32},
                          **changes})  # fmt: skip
    return write(tmp_path, doc)


def test_the_solver_shards_inside_nodes_when_the_network_is_slow(tmp_path, run_cli):
    best = solve_scenario(_scenario(tmp_path)).best
    assert best.plan is not None and best.plan.nodes == 4 and best.plan.zero_stage == 3
    assert best.plan.shard_group == 8 and best.plan.offload.value == "none"
    full = solve_scenario(_scenario(tmp_path, plan={"cards": 32, "shard_group": 32})).best  # pinned full sharding
    assert full.plan is not None and full.plan.shard_group is None
    assert best.time.hours < full.time.hours  # type: ignore[union-attr]
    sc, catalog, _ = prepare(_scenario(tmp_path))
    assert check_plan(sc, catalog, best) == []  # the validator recomputes memory and time with the shard group
    flat = best.model_copy(update={"plan": best.plan.model_copy(update={"shard_group": None})})
    assert any("memory" in m or "time" in m or "hours" in m for m in check_plan(sc, catalog, flat))
    # the plan is launched as planned: accelerate HYBRID_SHARD, Axolotl's HSDP sizes, and the text says it
    out = tmp_path / "launch"
    result = run_cli("solve", _scenario(tmp_path), "--launch-dir", out)
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "ZeRO-3 hybrid (sharded over the 8 ranks of each node, 4 replicas)" in text
    launch = "\n".join(p.read_text() for p in sorted(out.iterdir()) if p.is_file())
    assert "fsdp_sharding_strategy: HYBRID_SHARD" in launch
    assert "dp_shard_size: 8" in launch and "dp_replicate_size: 4" in launch
    doc = json.loads(run_cli("solve", _scenario(tmp_path), "--json").stdout)
    assert doc["plan"]["shard_group"] == 8


def test_a_fast_network_keeps_full_sharding_and_deepspeed_never_hybridises(tmp_path):
    fast = _scenario(tmp_path)
    offers = tmp_path / "offers.yaml"
    offers.write_text(offers.read_text().replace("inter_node_gb_per_s: 1.0", "inter_node_gb_per_s: 400.0"))
    best = solve_scenario(fast).best
    assert best.plan is not None and best.plan.nodes == 4 and best.plan.shard_group is None
    offers.write_text(offers.read_text().replace("inter_node_gb_per_s: 400.0", "inter_node_gb_per_s: 1.0"))
    ds = _scenario(tmp_path, training={**FULL_FSDP["training"], "sharding": "deepspeed"})
    best = solve_scenario(ds).best
    assert best.plan is not None and best.plan.shard_group is None


def test_a_hybrid_pin_under_an_engine_without_it_is_one_line(tmp_path, run_cli):
    path = _scenario(tmp_path, training={**FULL_FSDP["training"], "sharding": "deepspeed"},
                     plan={"cards": 32, "shard_group": 8})  # fmt: skip
    result = run_cli("solve", path)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "plan.shard_group" in result.stderr and "hf_fsdp" in result.stderr

"""A mixture-of-experts plan is outside every published run's cell (optimizer/models/coverage.py method_key): no
reference run is of an MoE model, and a dense run's efficiency says little about a router and many small expert
GEMMs. Before, Mixtral-8x7B LoRA under ZeRO-3 matched the dense LoRA runs' cell and printed a narrow band."""

from __future__ import annotations

import json

from optimizer.models import coverage as cov


def test_the_method_key_marks_moe_models():
    assert cov.method_key("lora") == "lora" and cov.method_key("lora", 8) == "lora+moe"
    assert cov.cell("hopper", "hf_deepspeed", cov.method_key("lora", 8), 3, "none", 1).split("/")[2] == "lora+moe"


def test_an_moe_plan_in_a_covered_cell_says_no_published_run_is_like_it(write_scenario, run_cli):
    """ampere/hf_deepspeed/lora/zero3/none/one-node holds published dense LoRA runs (PEFT's); Mixtral there is not
    like them."""
    cell = {"allow": {"gpus": ["A100-80G"], "max_nodes": 1},
            "plan": {"zero_stage": 3, "offload": "none"},
            "training": {"framework": "hf", "sharding": "deepspeed", "optimizer": "adamw", "attention": "flash"}}
    dense = json.loads(run_cli("solve", write_scenario("dense.yaml", model="Llama-3.1-8B", **cell), "--json").stdout)
    assert dense["uncertainty"]["time"]["published_run_like_this"] is True
    moe = json.loads(run_cli("solve", write_scenario("moe.yaml", model="Mixtral-8x7B", **cell), "--json").stdout)
    assert moe["plan"]["gpu"] == "A100-80G" and moe["plan"]["nodes"] == 1
    assert moe["uncertainty"]["time"]["published_run_like_this"] is False
    assert moe["uncertainty"]["memory"]["published_run_like_this"] is False

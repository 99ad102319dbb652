"""Launch values of the newer engines checked one by one against the plan (LoRA rank vs alpha, process counts).

A LoRA with rank 8 and alpha 24 (different numbers, so a swap shows) and a plan of 16 cards on 2 nodes of 8.
"""

from __future__ import annotations

from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch import launch_settings

from .conftest import scenario_doc
from .test_launch import _plan as launch_plan

LORA = {"rank": 8, "alpha": 24, "targets": ["q_proj", "v_proj"]}


def _scenario(**training) -> Scenario:
    return Scenario(**scenario_doc(method="lora", lora=LORA, training=training))


def _plan(**changes) -> Plan:
    """tests/test_launch.py's plan (16 A100s on 2 nodes of 8, ZeRO-3), without offload."""
    return launch_plan(**{"offload": "none", **changes})


def test_torchtune_lora_rank_and_alpha_are_the_scenarios():
    tt = launch_settings(_scenario(framework="torchtune", sharding="fsdp"), _plan(), cards_per_node=8)["torchtune"]
    assert (tt["model"]["lora_rank"], tt["model"]["lora_alpha"]) == (8, 24)


def test_nemo_lora_dim_is_the_rank_and_alpha_the_alpha():
    nemo = launch_settings(_scenario(framework="nemo"), _plan(zero_stage=0), cards_per_node=8)["nemo"]
    peft = nemo["peft"]
    assert (peft["dim"], peft["alpha"]) == (8, 24)


def test_hf_lora_config_carries_r_and_lora_alpha():
    settings = launch_settings(_scenario(framework="hf", sharding="deepspeed"), _plan(), cards_per_node=8)
    lora = settings["lora_config"]
    assert (lora["r"], lora["lora_alpha"]) == (8, 24)


def test_torchrun_starts_one_process_per_card_of_each_node():
    # 16 cards over 2 nodes of 8: --nnodes 2 --nproc_per_node 8 (16 per node would start 32 ranks)
    command = launch_settings(_scenario(framework="torchtune", sharding="fsdp"), _plan(), cards_per_node=8)["command"]
    assert "--nnodes 2 --nproc_per_node 8 " in command
    one = launch_settings(_scenario(framework="torchtune", sharding="fsdp"), _plan(cards=4, nodes=1, dp=4),
                          cards_per_node=8)["command"]  # fmt: skip
    assert "--nnodes 1 --nproc_per_node 4" in one

"""accelerate's FSDP plugin settings (``fsdp_config`` keys, each also an ``accelerate launch --fsdp_*`` flag).

Checked against accelerate 1.15 (its launch parser, ``FullyShardedDataParallelPlugin`` built from the flags'
environment) and torch 2.13 FSDP1 (tests_real/test_hf.py). Sources: huggingface/accelerate
src/accelerate/utils/dataclasses.py, utils/constants.py FSDP_SHARDING_STRATEGY,
docs/source/concept_guides/fsdp1_vs_fsdp2.md and fsdp_and_deepspeed.md; huggingface/peft docs accelerate/fsdp.md.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Checkpointing, Method, Offload, Scenario
from optimizer.inputs.schema_plan import Plan

SHARDING_STRATEGY = {3: "FULL_SHARD", 2: "SHARD_GRAD_OP", 1: "SHARD_GRAD_OP", 0: "NO_SHARD"}


def fsdp_plugin(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """The accelerate ``fsdp_config`` keys (FSDP1).

    FULL_SHARD for ZeRO-3, SHARD_GRAD_OP for ZeRO-1/2, HYBRID_SHARD for a hybrid plan (``shard_group``: full
    sharding inside each node, replication across nodes; torch FSDP1 builds the two process groups from the node
    size); FSDP offloads parameters, gradients and optimizer together or nothing (accelerate
    concept_guides/fsdp_and_deepspeed.md).
    """
    full = scenario.method is Method.full
    return {
        # fsdp_sharding_strategy and fsdp_use_orig_params exist in FSDP1 only (fsdp1_vs_fsdp2.md); the launcher
        # defaults to 1 today, pinned so that a changed default cannot drop them
        "fsdp_version": 1,
        "fsdp_sharding_strategy": (
            "HYBRID_SHARD" if plan.shard_group is not None else SHARDING_STRATEGY[plan.zero_stage]
        ),
        "fsdp_offload_params": plan.offload is not Offload.none,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_activation_checkpointing": full and plan.checkpointing is not Checkpointing.none,
        # PEFT: use_orig_params must be false to realise the memory saving of frozen weights, and QLoRA needs it
        # (peft accelerate/fsdp.md); the launcher's default is true, which full fine-tuning (and torch.compile) keeps
        "fsdp_use_orig_params": full,
        # rank 0 reads the checkpoint, the others start empty; needs sync_module_states (accelerate launch.py
        # raises without it); required for QLoRA (peft accelerate/fsdp.md)
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_sync_module_states": True,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",  # peft examples/sft/configs/fsdp_config*.yaml
    }

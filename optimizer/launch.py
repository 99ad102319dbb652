"""Turn a plan into the settings a user types: DeepSpeed JSON, HF TrainingArguments, accelerate/FSDP, torchtune, NeMo.

Key names follow each project's documentation: DeepSpeed config JSON (``zero_optimization.stage``,
``offload_optimizer.device``, ``train_micro_batch_size_per_gpu``; deepspeed.ai/docs/config-json), HF
``TrainingArguments`` (``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``gradient_checkpointing``,
``optim``, ``deepspeed``), accelerate's FSDP plugin (``fsdp_sharding_strategy``, ``fsdp_offload_params``),
torchtune recipe keys (``batch_size``, ``gradient_accumulation_steps``, ``enable_activation_checkpointing``,
``fsdp_cpu_offload``) and NeMo/Megatron model keys (``tensor_model_parallel_size``, ``micro_batch_size``).
"""

from __future__ import annotations

from typing import Any

from optimizer.schema import Checkpointing, Framework, Offload, OptimizerName, Precision, Scenario, Sharding
from optimizer.schema_plan import Plan

_HF_OPTIM = {
    OptimizerName.adamw: "adamw_torch_fused",
    OptimizerName.adamw_8bit: "adamw_bnb_8bit",
    OptimizerName.paged_adamw_8bit: "paged_adamw_8bit",
    OptimizerName.sgd: "sgd",
    OptimizerName.adafactor: "adafactor",
}


def deepspeed_config(plan: Plan) -> dict[str, Any]:
    """DeepSpeed config JSON for the plan (ZeRO stage, offload, batch sizes, mixed precision)."""
    zero: dict[str, Any] = {"stage": plan.zero_stage, "overlap_comm": True, "contiguous_gradients": True}
    if plan.offload is not Offload.none and plan.zero_stage >= 1:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload is Offload.all and plan.zero_stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "train_batch_size": plan.micro_batch * plan.grad_accum * plan.dp,
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
    }
    if plan.offload is not Offload.none and plan.optimizer is OptimizerName.adamw:
        # ZeRO-Offload refuses a client optimizer (zero_force_ds_cpu_optimizer); declared here, DeepSpeed builds
        # DeepSpeedCPUAdam and the HF Trainer fills the "auto" values from its TrainingArguments
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    if plan.precision is Precision.bf16:
        config["bf16"] = {"enabled": True}
    elif plan.precision is Precision.fp16:
        config["fp16"] = {"enabled": True, "loss_scale": 0}
    return config


def hf_arguments(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """HF ``TrainingArguments`` (Trainer, TRL SFTTrainer, LLaMA-Factory accept the same names)."""
    args: dict[str, Any] = {
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_checkpointing": plan.checkpointing is not Checkpointing.none,
        "bf16": plan.precision is Precision.bf16,
        "fp16": plan.precision is Precision.fp16,
        "optim": _HF_OPTIM[plan.optimizer],
    }
    if plan.zero_stage > 0 and scenario.training.sharding is Sharding.deepspeed:
        args["deepspeed"] = "ds_config.json"
    return args


def fsdp_plugin(plan: Plan) -> dict[str, Any]:
    """Accelerate FSDP settings: FULL_SHARD for ZeRO-3, SHARD_GRAD_OP for ZeRO-2 (FSDP offloads all or nothing)."""
    strategy = {3: "FULL_SHARD", 2: "SHARD_GRAD_OP", 1: "SHARD_GRAD_OP", 0: "NO_SHARD"}[plan.zero_stage]
    return {
        "fsdp_sharding_strategy": strategy,
        "fsdp_offload_params": plan.offload is not Offload.none,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_activation_checkpointing": plan.checkpointing is not Checkpointing.none,
        "mixed_precision": plan.precision.value,
    }


def launcher(plan: Plan) -> str:
    """The accelerate command line for the plan's processes (all nodes) and machines."""
    cmd = f"accelerate launch --num_processes {plan.cards} --num_machines {plan.nodes}"
    if plan.nodes > 1:
        cmd += " --machine_rank $NODE_RANK --main_process_ip $MASTER_ADDR --main_process_port 29500"
    return cmd + " train.py"


def launch_settings(scenario: Scenario, plan: Plan, cards_per_node: int) -> dict[str, Any]:
    """Everything needed to start the plan with the scenario's framework, as plain data."""
    fw = scenario.training.framework
    notes: list[str] = []
    if plan.tp > 1 or plan.pp > 1:
        notes.append(
            f"tp={plan.tp}, pp={plan.pp} need a tensor/pipeline-parallel stack (NeMo/Megatron, torchtitan, "
            "or transformers tp_plan='auto'); HF Trainer with DeepSpeed alone runs data parallel only"
        )
    if fw is Framework.torchtune:
        settings: dict[str, Any] = {
            "torchtune": {
                "batch_size": plan.micro_batch,
                "gradient_accumulation_steps": plan.grad_accum,
                "enable_activation_checkpointing": plan.checkpointing is not Checkpointing.none,
                "fsdp_cpu_offload": plan.offload is not Offload.none,
                "dtype": plan.precision.value,
            },
            "command": f"tune run --nnodes {plan.nodes} --nproc_per_node {min(plan.cards, cards_per_node)} <recipe>",
        }
    elif fw is Framework.nemo:
        settings = {
            "nemo": {
                "tensor_model_parallel_size": plan.tp,
                "pipeline_model_parallel_size": plan.pp,
                "micro_batch_size": plan.micro_batch,
                "global_batch_size": plan.micro_batch * plan.grad_accum * plan.dp,
                "activations_checkpoint_granularity": (
                    None if plan.checkpointing is Checkpointing.none else plan.checkpointing.value
                ),
                "precision": "bf16-mixed" if plan.precision is Precision.bf16 else plan.precision.value,
                "use_distributed_optimizer": plan.zero_stage >= 1,
            },
            "command": f"torchrun --nnodes {plan.nodes} --nproc_per_node {min(plan.cards, cards_per_node)} <script>",
        }
    else:
        settings = {"training_arguments": hf_arguments(scenario, plan), "command": launcher(plan)}
        if plan.zero_stage > 0 and scenario.training.sharding is Sharding.fsdp:
            settings["accelerate_fsdp"] = fsdp_plugin(plan)
        elif plan.zero_stage > 0 or plan.offload is not Offload.none:
            settings["ds_config.json"] = deepspeed_config(plan)
    if notes:
        settings["notes"] = notes
    return settings

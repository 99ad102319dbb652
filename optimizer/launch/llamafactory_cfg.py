"""LLaMA-Factory export: the ``llamafactory-cli train`` YAML, its command and the environment it needs.

Checked against llamafactory 0.9.5 (tests_real/test_llamafactory.py parses the YAML with its own
``get_train_args`` in a separate environment, since it pins its own transformers). Sources: hiyouga/LLaMA-Factory
src/llamafactory/hparams/{model_args,finetuning_args,data_args}.py, src/llamafactory/cli.py and launcher.py
(FORCE_TORCHRUN, NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT), examples/deepspeed/*.json and
examples/accelerate/fsdp_config.yaml.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Attention, Checkpointing, Method, ModelArch, Precision, Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.ds_config import ds_declares_optimizer
from optimizer.launch.hf_args import accelerator_config, hf_optim, hf_optim_args, launcher, use_reentrant
from optimizer.launch.launch_common import (
    LR_SCHEDULE,
    MASTER_PORT,
    half_bf16,
    plan_attention,
    uses_deepspeed,
    uses_fsdp,
)
from optimizer.launch.lora_names import lora_names

# LLaMA-Factory ModelArguments flash_attn: auto | disabled | sdpa | fa2
FLASH_ATTN = {Attention.flash: "fa2", Attention.sdpa: "sdpa", Attention.eager: "disabled"}
CONFIG_FILE = "llamafactory.yaml"
# LLaMA-Factory 0.9.5 has no activation offloading among its arguments (hparams/*.py)
LLAMAFACTORY_NO_ACT_OFFLOAD = ("llamafactory.yaml: LLaMA-Factory has no activation offloading, so its run keeps the "
                               "activations this plan offloads on the GPU and may not fit: use the TRL export "
                               "(sft_config activation_offloading) or axolotl.yaml")
# LLaMA-Factory's packing keeps each sample whole: a greedy knapsack fills cutoff_len rows, pads what is left and drops
# a sample longer than cutoff_len (llamafactory 0.9.5 data/processor/supervised.py PackedSupervisedDatasetProcessor),
# where the plan counts samples concatenated and cut into full rows (TRL's wrapped packing, sft_config)
LLAMAFACTORY_PACKING = ("llamafactory.yaml: LLaMA-Factory packs whole samples into rows of {seq_len} tokens and pads "
                        "the rest (and drops samples longer than that), so its rows hold fewer tokens than the plan's "
                        "and max_steps ends the run before all the data is seen; the TRL export (sft_config) packs as "
                        "the plan counts")


def llamafactory_config(scenario: Scenario, plan: Plan, arch: ModelArch | None = None) -> dict[str, Any]:
    """The training YAML (model, method, dataset placeholders, batch and precision keys).

    LLaMA-Factory's parser takes TrainingArguments fields (hparams/training_args.py subclasses transformers'
    Seq2SeqTrainingArguments), so the schedule and FSDP's ``accelerator_config`` are the HF file's; its own
    ``use_reentrant_gc`` (ModelArguments, default True) is set to the HF file's use_reentrant.

    ``lora_target`` names Linear modules only: an MoE model's routed experts, parameters in transformers 5, get no
    adapter under LLaMA-Factory (lora_names.llamafactory_notes says so).
    """
    spec = scenario.lora_spec
    cfg: dict[str, Any] = {
        # the catalog name is not a hub id: the user puts the checkpoint's path or hub id here
        "model_name_or_path": f"<path to {scenario.model}>" if isinstance(scenario.model, str) else "<model path>",
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full" if scenario.method is Method.full else "lora",
    }
    if scenario.method is not Method.full and spec is not None:
        targets = lora_names(scenario, arch).modules
        cfg["lora_rank"] = spec.rank
        cfg["lora_alpha"] = spec.alpha
        cfg["lora_dropout"] = spec.dropout
        cfg["lora_target"] = "all" if targets == "all-linear" else ",".join(targets)
    if scenario.frozen_base_bits < 16:
        cfg["quantization_bit"] = scenario.frozen_base_bits
        cfg["quantization_method"] = "bnb"  # bitsandbytes; nf4 with double quantisation are its defaults
        cfg["quantization_type"] = "nf4"
        cfg["double_quantization"] = True
    cfg["flash_attn"] = FLASH_ATTN[plan_attention(scenario, plan)]
    if uses_deepspeed(scenario, plan):
        cfg["deepspeed"] = "ds_config.json"
    cfg.update({
        "dataset": "<dataset>",
        "template": "<template>",
        "cutoff_len": scenario.seq_len,
        # DataArguments packing: whole samples packed into cutoff_len rows (greedy knapsack; LLAMAFACTORY_PACKING)
        "packing": scenario.data.packing,
        "output_dir": "<output_dir>",
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "bf16": half_bf16(plan),  # fp8 plans too: no fp8 switch (launch_common.half_bf16)
        "fp16": plan.precision is Precision.fp16,
        # LLaMA-Factory checkpoints activations unless told not to (ModelArguments disable_gradient_checkpointing);
        # under FSDP full fine-tuning the FSDP plugin recomputes instead
        "disable_gradient_checkpointing": plan.checkpointing is Checkpointing.none
        or (uses_fsdp(scenario, plan) and scenario.method is Method.full),
        **LR_SCHEDULE,
    })  # fmt: skip
    if not cfg["disable_gradient_checkpointing"]:
        cfg["use_reentrant_gc"] = use_reentrant(scenario, plan)  # model_utils/checkpointing.py passes it on
    sync = accelerator_config(scenario, plan)
    if sync is not None:
        cfg["accelerator_config"] = sync
    if not (uses_deepspeed(scenario, plan) and ds_declares_optimizer(plan)):
        cfg["optim"] = hf_optim(scenario, plan)
        if (extra := hf_optim_args(plan)) is not None:
            cfg["optim_args"] = extra
    return cfg


def llamafactory_environment(scenario: Scenario, plan: Plan, cards_per_node: int) -> dict[str, str]:
    """Environment variables ``llamafactory-cli train`` reads to start torchrun (llamafactory cli.py/launcher.py).

    FORCE_TORCHRUN=1 makes it start torchrun even on one GPU, which DeepSpeed needs for its rank variables; NNODES,
    NODE_RANK, MASTER_ADDR and MASTER_PORT span nodes; NPROC_PER_NODE is the cards per node.
    """
    env = {"NPROC_PER_NODE": str(min(plan.cards, cards_per_node))}
    if uses_deepspeed(scenario, plan) or plan.cards > 1:
        env["FORCE_TORCHRUN"] = "1"
    if plan.nodes > 1:
        env.update({"NNODES": str(plan.nodes), "NODE_RANK": "$NODE_RANK", "MASTER_ADDR": "$MASTER_ADDR",
                    "MASTER_PORT": str(MASTER_PORT)})  # fmt: skip
    return env


def llamafactory_settings(
    scenario: Scenario, plan: Plan, cards_per_node: int, fsdp: dict[str, Any] | None
) -> dict[str, Any]:
    """Its environment and command (FSDP goes through accelerate with LLaMA-Factory's launcher).

    The YAML is :func:`llamafactory_config`, written as a file by the exporter registry (exporters.py).
    """
    env = llamafactory_environment(scenario, plan, cards_per_node)
    if fsdp is not None:
        command = launcher(scenario, plan, fsdp).replace(" train.py", f" -m llamafactory.launcher {CONFIG_FILE}")
    else:
        command = " ".join(f"{k}={v}" for k, v in env.items()) + f" llamafactory-cli train {CONFIG_FILE}"
    return {"environment": env, "command": command}

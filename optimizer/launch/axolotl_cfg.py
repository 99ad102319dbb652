"""Axolotl export: the ``axolotl train`` YAML for an hf plan.

Checked against axolotl 0.19.0 (tests_real/test_axolotl.py validates the YAML with Axolotl's own
``axolotl.utils.config.validate_config``, given the planned GPU's capabilities, in a separate environment since it
pins its own transformers). Sources: axolotl-ai-cloud/axolotl src/axolotl/utils/schemas/config.py (sequence_len,
sample_packing, pad_to_sequence_len, excess_length_strategy, attn_implementation, bf16/fp16/fp8,
gradient_checkpointing, deepspeed, fsdp_version, fsdp_config), peft.py (adapter, load_in_4bit/8bit, lora_*),
training.py (micro_batch_size, gradient_accumulation_steps, optimizer), fsdp.py (FSDPConfig), and
utils/schemas/validation.py (FSDP1 is deprecated there, so FSDP plans are written for FSDP2).
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Attention, Checkpointing, Method, ModelArch, Offload, Precision, Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.ds_config import ds_declares_optimizer
from optimizer.launch.hf_args import accelerator_config, hf_optim, hf_optim_args, trainer_recomputes, use_reentrant
from optimizer.launch.launch_common import LR_SCHEDULE, plan_attention, torchrun_args, uses_deepspeed, uses_fsdp
from optimizer.launch.lora_names import lora_names

CONFIG_FILE = "axolotl.yaml"
# Axolotl attn_implementation (the flash_attention / sdp_attention / eager_attention booleans are deprecated aliases)
ATTN_IMPLEMENTATION = {Attention.flash: "flash_attention_2", Attention.sdpa: "sdpa", Attention.eager: "eager"}


def axolotl_config(scenario: Scenario, plan: Plan, arch: ModelArch | None = None) -> dict[str, Any]:
    """The training YAML: model, adapter, rows, batch, precision, kernel, checkpointing, sharding, optimizer.

    Rows: ``sample_packing`` packs samples into ``sequence_len`` rows as a packed plan counts them (its multipack
    keeps each sample whole, so a sample longer than sequence_len is cut there: ``excess_length_strategy:
    truncate``, where the plan would continue it in the next row); unpacked, one sample per row, cut at sequence_len.
    LoRA targets as ``arch`` names them (lora_names.py): an MoE model's routed experts are
    ``lora_target_parameters`` (Axolotl's key for PEFT's target_parameters, utils/schemas/peft.py).
    """
    spec = scenario.lora_spec
    cfg: dict[str, Any] = {
        # the catalog name is not a hub id: the user puts the checkpoint's path or hub id here
        "base_model": f"<path to {scenario.model}>" if isinstance(scenario.model, str) else "<model path>",
    }
    if scenario.method is not Method.full and spec is not None:
        cfg["adapter"] = "qlora" if scenario.frozen_base_bits == 4 else "lora"
        if scenario.frozen_base_bits == 4:
            cfg["load_in_4bit"] = True  # NF4 with double quantisation: Axolotl's bnb defaults for qlora
        elif scenario.frozen_base_bits == 8:
            cfg["load_in_8bit"] = True
        cfg.update(lora_r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout)
        names = lora_names(scenario, arch)
        if names.modules == "all-linear":
            cfg["lora_target_linear"] = True
        else:
            cfg["lora_target_modules"] = list(names.modules)
        if names.parameters:
            cfg["lora_target_parameters"] = list(names.parameters)
    cfg.update({
        "datasets": [{"path": "<dataset>", "type": "<type>"}],
        "output_dir": "<output_dir>",
        "sequence_len": scenario.seq_len,
        "sample_packing": scenario.data.packing,
        "pad_to_sequence_len": scenario.data.packing,  # Axolotl's advice with sample_packing
        "excess_length_strategy": "truncate",
        # required by Axolotl; ftopt plans no learning rate: the HF Trainer's default, which the HF and LLaMA-Factory
        # exports run with unless the user sets one (transformers TrainingArguments learning_rate 5e-5)
        "learning_rate": 5.0e-5,
        # the HF file's schedule (launch_common.LR_SCHEDULE); Axolotl's default is cosine with 3% warm-up
        "lr_scheduler": LR_SCHEDULE["lr_scheduler_type"],
        "warmup_steps": LR_SCHEDULE["warmup_steps"],
        "micro_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "bf16": plan.precision in (Precision.bf16, Precision.fp8),
        "fp16": plan.precision is Precision.fp16,
        "attn_implementation": ATTN_IMPLEMENTATION[plan_attention(scenario, plan)],
    })  # fmt: skip
    if plan.precision is Precision.fp8:
        cfg["fp8"] = True  # torchao float8 training on top of bf16
    cfg.update(recompute_keys(scenario, plan))
    if uses_deepspeed(scenario, plan):
        cfg["deepspeed"] = "ds_config.json"
    elif uses_fsdp(scenario, plan):
        cfg["fsdp_version"] = 2
        cfg["fsdp_config"] = fsdp_config(scenario, plan)
        if plan.shard_group is not None:  # hybrid sharding (HSDP): FSDP inside the group, DDP across the groups
            cfg["dp_shard_size"] = plan.shard_group  # Axolotl >= 0.12 docs/nd_parallelism.qmd "HSDP"
            cfg["dp_replicate_size"] = plan.dp // plan.shard_group
        sync = accelerator_config(scenario, plan)
        if sync is not None:  # Axolotl builds accelerate's AcceleratorConfig from it (core/builders/base.py)
            cfg["accelerator_config"] = sync
    if not (uses_deepspeed(scenario, plan) and ds_declares_optimizer(plan)):
        cfg["optimizer"] = hf_optim(scenario, plan)
        if (extra := hf_optim_args(plan)) is not None:
            cfg["optim_args"] = extra
    return cfg


def recompute_keys(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """Checkpointing and activation offloading as the plan prices them.

    ``gradient_checkpointing`` when the Trainer recomputes, with the HF export's use_reentrant for adapters
    (hf_args.use_reentrant, from PEFT's launch scripts). ``activation_offloading`` (Axolotl utils/schemas/config.py,
    core/builders/base.py): true is TRL's offloader, which replaces the Trainer's recomputation (a plan without it);
    "hidden_states" keeps the Trainer's checkpointing and offloads the inputs it saves (a plan the Trainer recomputes;
    under FSDP full fine-tuning FSDP recomputes and the Trainer must not, so that plan takes true). Axolotl refuses
    activation_offloading without gradient_checkpointing (utils/schemas/validation.py
    check_activation_offloading_wo_gc), which its builder then turns off for the offloader: both are set.
    """
    recompute = trainer_recomputes(scenario, plan)
    keys: dict[str, Any] = {"gradient_checkpointing": recompute or scenario.training.activation_offload}
    if recompute and scenario.method is not Method.full:
        keys["gradient_checkpointing_kwargs"] = {"use_reentrant": use_reentrant(scenario, plan)}
    if scenario.training.activation_offload:
        keys["activation_offloading"] = "hidden_states" if recompute else True
    return keys


def fsdp_config(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """Axolotl ``fsdp_config`` (FSDP2): full sharding for ZeRO-3, gradients and states only for ZeRO-1/2."""
    full = scenario.method is Method.full
    out: dict[str, Any] = {
        "offload_params": plan.offload is not Offload.none,
        "reshard_after_forward": plan.zero_stage >= 3,  # False: parameters stay gathered (SHARD_GRAD_OP)
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",  # the decoder layer class from the model's _no_split_modules
        "state_dict_type": "SHARDED_STATE_DICT",
        "activation_checkpointing": full and plan.checkpointing is not Checkpointing.none,
    }
    # FSDP2 refuses cpu_ram_efficient_loading with a 4-bit base (Axolotl validation), and accelerate with torchao
    # fp8 (accelerator.py: "torchao with FSDP2 and cpu_ram_efficient_loading is not supported"; Axolotl's fp8: true
    # is torchao's); otherwise rank 0 reads
    if scenario.frozen_base_bits != 4 and plan.precision is not Precision.fp8:
        out["cpu_ram_efficient_loading"] = True
    return out


def axolotl_notes(scenario: Scenario, plan: Plan) -> list[str]:
    """Where axolotl.yaml runs otherwise than the plan is priced, and what Axolotl itself warns about.

    - Full fine-tuning without DeepSpeed or FSDP: Axolotl loads the weights in the dtype of its bf16/fp16 switch
      (utils/config/__init__.py: ``cfg.torch_dtype``), so it trains 16-bit weights and optimizer states where the
      plan prices fp32 master weights (hf_args.load_dtype); a float16 checkpoint under fp16 stops at the first step.
    - Packing with sdpa in bf16 (utils/schemas/config.py check_sample_packing_w_sdpa_bf16).
    """
    notes = []
    half = plan.precision is not Precision.fp32
    if scenario.method is Method.full and half and not (uses_deepspeed(scenario, plan) or uses_fsdp(scenario, plan)):
        notes.append("axolotl.yaml: Axolotl loads the weights in the precision it trains in, so without DeepSpeed or "
                     "FSDP it trains 16-bit weights and optimizer states, not the fp32 master weights this plan "
                     "prices (and an fp16 checkpoint under fp16 fails at the first step): launch the Trainer "
                     "(launch.yaml) or LLaMA-Factory for this plan")  # fmt: skip
    sdpa = plan_attention(scenario, plan) is Attention.sdpa
    if scenario.data.packing and sdpa and plan.precision is Precision.bf16:
        notes.append("axolotl.yaml: Axolotl warns that sample_packing with sdpa in bf16 may train to a 0.0 loss on "
                     "GPUs before Hopper (sm90); there, set training.attention: flash or use the TRL/LLaMA-Factory "
                     "export")  # fmt: skip
    return notes


def axolotl_command(plan: Plan, cards_per_node: int) -> str:
    """``torchrun ... -m axolotl.cli.train axolotl.yaml``: torchrun sets the rank variables on one GPU too."""
    return f"torchrun {torchrun_args(plan, cards_per_node)} -m axolotl.cli.train {CONFIG_FILE}"

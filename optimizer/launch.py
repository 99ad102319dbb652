"""Turn a plan into the settings a user types: DeepSpeed JSON, HF TrainingArguments, accelerate/FSDP, torchtune, NeMo.

Every key is spelled as its project spells it; the comment beside a key names the file or page it was checked
against. The main sources:

* DeepSpeed config JSON: deepspeedai/DeepSpeed:docs/_pages/config-json.md (deepspeed.ai/docs/config-json);
* HF ``TrainingArguments`` and its DeepSpeed glue: huggingface/transformers:src/transformers/training_args.py,
  src/transformers/integrations/deepspeed.py, src/transformers/trainer.py;
* accelerate's launcher and FSDP plugin: huggingface/accelerate:src/accelerate/commands/launch.py,
  src/accelerate/utils/dataclasses.py (FullyShardedDataParallelPlugin), docs/source/concept_guides/fsdp1_vs_fsdp2.md;
* LoRA/QLoRA under ZeRO-3 and FSDP: huggingface/peft:docs/source/accelerate/deepspeed.md and fsdp.md, with the
  scripts they run (examples/sft/run_peft_*.sh, train.py, utils.py);
* torchtune recipe keys: pytorch/torchtune:recipes/full_finetune_distributed.py, lora_finetune_distributed.py and
  recipes/configs (torchtune 0.6);
* NeMo 2 / Megatron-Core keys: NVIDIA/NeMo:nemo/collections/llm/recipes/CONFIGURATION-HIERARCHY.md and
  megatron/core/transformer/transformer_config.py (recompute_* validation).
"""

from __future__ import annotations

from typing import Any

from optimizer.schema import (
    Checkpointing,
    Framework,
    Method,
    Offload,
    OptimizerName,
    Precision,
    Scenario,
    Sharding,
)
from optimizer.schema_plan import Plan

# TrainingArguments ``optim`` values (transformers training_args.py OptimizerNames)
_HF_OPTIM = {
    OptimizerName.adamw: "adamw_torch_fused",
    OptimizerName.adamw_8bit: "adamw_bnb_8bit",
    OptimizerName.paged_adamw_8bit: "paged_adamw_8bit",
    OptimizerName.sgd: "sgd",
    OptimizerName.adafactor: "adafactor",
}
# accelerate ``--mixed_precision`` choices: no | fp16 | bf16 | fp8 (accelerate commands/launch.py)
_ACCELERATE_PRECISION = {Precision.bf16: "bf16", Precision.fp16: "fp16", Precision.fp8: "fp8", Precision.fp32: "no"}
# NeMo 2 MegatronMixedPrecision ``precision``: "16-mixed" | "bf16-mixed" | "32"; FP8 runs on top of bf16-mixed
_NEMO_PRECISION = {
    Precision.bf16: "bf16-mixed",
    Precision.fp16: "16-mixed",
    Precision.fp32: "32",
    Precision.fp8: "bf16-mixed",
}
_TORCH_DTYPE = {Precision.fp16: "float16"}  # anything else computes in bfloat16 (the QLoRA compute dtype)
_RDZV = "--rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"  # torchrun multi-node rendezvous
_ZERO3_LOADING = (
    "build TrainingArguments(deepspeed='ds_config.json') before from_pretrained: transformers then loads the model "
    "already partitioned (deepspeed.zero.Init) instead of whole on every rank (transformers "
    "integrations/deepspeed.py is_deepspeed_zero3_enabled)"
)


def uses_deepspeed(scenario: Scenario, plan: Plan) -> bool:
    """Whether the hf plan runs under DeepSpeed (a ZeRO stage or an offload with ``sharding: deepspeed``)."""
    hf = scenario.training.framework is Framework.hf and scenario.training.sharding is Sharding.deepspeed
    return hf and (plan.zero_stage > 0 or plan.offload is not Offload.none)


def uses_fsdp(scenario: Scenario, plan: Plan) -> bool:
    """Whether the hf plan runs under accelerate's FSDP (a ZeRO stage with ``sharding: fsdp``)."""
    hf = scenario.training.framework is Framework.hf and scenario.training.sharding is Sharding.fsdp
    return hf and plan.zero_stage > 0


def ds_declares_optimizer(plan: Plan) -> bool:
    """Whether ds_config.json names the optimizer: ZeRO-Offload of AdamW.

    ZeRO-Offload refuses a client optimizer (zero_force_ds_cpu_optimizer); declared in the config, DeepSpeed builds
    DeepSpeedCPUAdam, and the HF Trainer hands it a DummyOptim instead of building its own
    (transformers integrations/deepspeed.py deepspeed_optim_sched).
    """
    return plan.offload is not Offload.none and plan.zero_stage >= 1 and plan.optimizer is OptimizerName.adamw


def deepspeed_config(plan: Plan) -> dict[str, Any]:
    """DeepSpeed config JSON for the plan (ZeRO stage, offload, batch sizes, mixed precision)."""
    zero: dict[str, Any] = {"stage": plan.zero_stage, "overlap_comm": True, "contiguous_gradients": True}
    if plan.offload is not Offload.none and plan.zero_stage >= 1:  # config-json: valid for ZeRO stage 1, 2, 3
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload is Offload.all and plan.zero_stage == 3:  # config-json: offload_param "valid only with stage 3"
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if plan.zero_stage == 3:
        # otherwise Trainer.save_model writes no usable weights under ZeRO-3 (transformers trainer.py); accelerate's
        # zero3_save_16bit_model, which the PEFT ZeRO-3 configs set to true, is this key
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "train_batch_size": plan.micro_batch * plan.grad_accum * plan.dp,
        "zero_optimization": zero,
        # must equal TrainingArguments max_grad_norm (default 1.0): the Trainer rejects a mismatch
        # (HfTrainerDeepSpeedConfig.trainer_config_process fill_match "gradient_clipping")
        "gradient_clipping": 1.0,
    }
    if ds_declares_optimizer(plan):
        # "auto": the HF Trainer fills learning_rate, adam_beta1/2, adam_epsilon and weight_decay in
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    if plan.precision is Precision.bf16:
        config["bf16"] = {"enabled": True}
    elif plan.precision is Precision.fp16:
        config["fp16"] = {"enabled": True, "loss_scale": 0}  # config-json: loss_scale 0 = dynamic loss scaling
    else:  # the Trainer takes a config with neither block for fp16 ("deepspeed's default mode is fp16")
        config["fp16"] = {"enabled": False}
    return config


def _sharded(scenario: Scenario, plan: Plan) -> bool:
    """Parameters sharded across ranks: FSDP, or DeepSpeed ZeRO-3."""
    return uses_fsdp(scenario, plan) or (uses_deepspeed(scenario, plan) and plan.zero_stage == 3)


def hf_arguments(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """HF ``TrainingArguments`` (Trainer, TRL SFTTrainer, LLaMA-Factory accept the same names).

    ``activation_offloading`` (only when the scenario asks for it) is TRL ``SFTConfig``'s, not the plain Trainer's.
    """
    recompute = plan.checkpointing is not Checkpointing.none
    adapters = scenario.method is not Method.full
    # Under FSDP full fine-tuning recomputes through fsdp_activation_checkpointing: the Trainer raises if both that
    # and gradient_checkpointing are true (transformers trainer.py "can't be set to True simultaneously"). PEFT's
    # LoRA/QLoRA FSDP recipe keeps the Trainer's gradient_checkpointing instead (peft docs accelerate/fsdp.md).
    trainer_recomputes = recompute and (adapters or not uses_fsdp(scenario, plan))
    args: dict[str, Any] = {
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_checkpointing": trainer_recomputes,
        "bf16": plan.precision is Precision.bf16,
        "fp16": plan.precision is Precision.fp16,
    }
    if trainer_recomputes and adapters:
        # PEFT's launch scripts: use_reentrant True for QLoRA under ZeRO-3 or FSDP (run_peft_qlora_deepspeed_stage3.sh,
        # run_peft_qlora_fsdp.sh), False for LoRA under them and for QLoRA under DDP (run_peft_deepspeed.sh,
        # run_peft_fsdp.sh, run_peft_multigpu.sh); train.py passes it as gradient_checkpointing_kwargs
        reentrant = scenario.frozen_base_bits < 16 and _sharded(scenario, plan)
        args["gradient_checkpointing_kwargs"] = {"use_reentrant": reentrant}
    if not (uses_deepspeed(scenario, plan) and ds_declares_optimizer(plan)):
        # with "optimizer" in ds_config.json the Trainer ignores optim (DummyOptim), so printing one would contradict
        # the config: DeepSpeed steps DeepSpeedCPUAdam on the host
        args["optim"] = _HF_OPTIM[plan.optimizer]
    if scenario.training.compile:
        args["torch_compile"] = True  # TrainingArguments torch_compile
    if scenario.training.activation_offload:
        args["activation_offloading"] = True  # TRL SFTConfig only (huggingface/trl trl/trainer/sft_config.py)
    if uses_deepspeed(scenario, plan):
        args["deepspeed"] = "ds_config.json"
    return args


def fsdp_plugin(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """The accelerate ``fsdp_config`` keys (FSDP1), each also an ``accelerate launch --fsdp_*`` flag.

    FULL_SHARD for ZeRO-3, SHARD_GRAD_OP for ZeRO-1/2 (accelerate constants FSDP_SHARDING_STRATEGY); FSDP offloads
    parameters, gradients and optimizer together or nothing (accelerate concept_guides/fsdp_and_deepspeed.md).
    """
    strategy = {3: "FULL_SHARD", 2: "SHARD_GRAD_OP", 1: "SHARD_GRAD_OP", 0: "NO_SHARD"}[plan.zero_stage]
    full = scenario.method is Method.full
    return {
        # fsdp_sharding_strategy and fsdp_use_orig_params exist in FSDP1 only (fsdp1_vs_fsdp2.md); the launcher
        # defaults to 1 today, pinned so that a changed default cannot drop them
        "fsdp_version": 1,
        "fsdp_sharding_strategy": strategy,
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


def from_pretrained(scenario: Scenario, plan: Plan) -> dict[str, Any] | None:
    """``AutoModelForCausalLM.from_pretrained`` keyword arguments for a 4- or 8-bit base, else None.

    NF4 with double quantisation is the base the memory model prices (QLoRA paper; bitsandbytes defaults to fp4).
    Sharded (ZeRO-3 or FSDP), the packed weights must be stored in the model's float dtype, and ``dtype`` must match
    it: bfloat16 under bf16; float32 under fp16 "for stable automatic mixed precision" (peft accelerate/fsdp.md and
    deepspeed.md, examples/sft/utils.py).
    """
    bits = scenario.frozen_base_bits
    if bits == 16:
        return None
    if bits == 8:
        return {"quantization_config": {"load_in_8bit": True}}
    quant: dict[str, Any] = {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": _TORCH_DTYPE.get(plan.precision, "bfloat16"),
    }
    kwargs: dict[str, Any] = {"quantization_config": quant}
    if _sharded(scenario, plan):
        storage = "float32" if plan.precision is Precision.fp16 else "bfloat16"
        quant["bnb_4bit_quant_storage"] = storage
        kwargs["dtype"] = storage  # transformers >= 4.56 name; torch_dtype before
    return kwargs


def _flag(value: Any) -> str:
    """A value as accelerate's command line reads it (booleans as true/false)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def launcher(plan: Plan, fsdp: dict[str, Any] | None = None) -> str:
    """The accelerate command line for the plan's processes (all nodes) and machines.

    With FSDP the plugin's settings go on the command line (``--use_fsdp`` and each ``--fsdp_*`` flag): without them
    ``accelerate launch`` starts plain data parallel, or whatever its default config file says. DeepSpeed needs no
    flag: the ``deepspeed`` training argument turns it on (transformers training_args.py).
    """
    cmd = "accelerate launch"
    if fsdp is not None:
        cmd += " --use_fsdp " + " ".join(f"--{k} {_flag(v)}" for k, v in fsdp.items())
        cmd += f" --mixed_precision {_ACCELERATE_PRECISION[plan.precision]}"
    cmd += f" --num_processes {plan.cards} --num_machines {plan.nodes}"
    if plan.nodes > 1:
        cmd += " --machine_rank $NODE_RANK --main_process_ip $MASTER_ADDR --main_process_port 29500"
    return cmd + " train.py"


def _torchrun_args(plan: Plan, cards_per_node: int) -> str:
    """The torchrun node and process counts, with a c10d rendezvous when the plan spans nodes."""
    args = f"--nnodes {plan.nodes} --nproc_per_node {min(plan.cards, cards_per_node)}"
    return args + (f" {_RDZV}" if plan.nodes > 1 else "")


def torchtune_settings(scenario: Scenario, plan: Plan, cards_per_node: int) -> tuple[dict[str, Any], list[str]]:
    """The torchtune recipe overrides, the ``tune run`` command, and what the recipe cannot do as planned."""
    t = scenario.training
    full = scenario.method is Method.full
    keys: dict[str, Any] = {
        "batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "enable_activation_checkpointing": plan.checkpointing is not Checkpointing.none,
        "enable_activation_offloading": t.activation_offload,
        "fsdp_cpu_offload": plan.offload is not Offload.none,
        "fsdp_reshard_after_forward": plan.zero_stage >= 3,  # False = SHARD_GRAD_OP (recipe docstring)
        "compile": t.compile,
        "dtype": plan.precision.value,
    }
    if full:
        keys["optimizer_in_bwd"] = t.optimizer_in_backward  # full-fine-tuning recipes only
    recipe = "full_finetune_distributed" if full else "lora_finetune_distributed"
    notes = []
    if plan.precision not in (Precision.bf16, Precision.fp32):
        notes.append(
            f"torchtune recipes take dtype bf16 or fp32 only ({recipe}.py raises for fp16): "
            f"this {plan.precision.value} plan does not run under torchtune"
        )
    if plan.checkpointing is Checkpointing.selective:
        notes.append(
            "torchtune 0.6 has no per-operator selective checkpointing (its ac_mode 'selective' recomputes "
            "every n-th whole layer): full checkpointing is set, which needs less memory, more time"
        )
    if full and plan.offload is not Offload.none and plan.dp == 1:
        notes.append(
            f"{recipe} applies FSDP, and so fsdp_cpu_offload, only with more than one data-parallel rank: "
            "on one GPU the offload this plan relies on does not happen"
        )
    if t.activation_offload and plan.checkpointing is Checkpointing.none:
        notes.append("torchtune raises for enable_activation_offloading without enable_activation_checkpointing")
    command = f"tune run {_torchrun_args(plan, cards_per_node)} {recipe} --config <config>"
    return {"torchtune": keys, "command": command}, notes


def nemo_settings(plan: Plan, cards_per_node: int) -> dict[str, Any]:
    """NeMo 2 / Megatron-Core settings (MegatronStrategy, GPTConfig, data module, OptimizerConfig, precision)."""
    keys: dict[str, Any] = {
        "tensor_model_parallel_size": plan.tp,
        "pipeline_model_parallel_size": plan.pp,
        "micro_batch_size": plan.micro_batch,
        "global_batch_size": plan.micro_batch * plan.grad_accum * plan.dp,
        "recompute_granularity": None if plan.checkpointing is Checkpointing.none else plan.checkpointing.value,
    }
    if plan.checkpointing is Checkpointing.full:
        # TransformerConfig raises for full recomputation without a method and a layer count; uniform over groups of
        # one layer recomputes every layer from its input
        keys["recompute_method"] = "uniform"
        keys["recompute_num_layers"] = 1
    keys["precision"] = _NEMO_PRECISION[plan.precision]
    if plan.precision is Precision.fp8:
        keys["fp8"] = "hybrid"  # MegatronMixedPrecision fp8: "e4m3" | "hybrid" (E4M3 forward, E5M2 gradients)
    keys["use_distributed_optimizer"] = plan.zero_stage >= 1
    command = f"torchrun {_torchrun_args(plan, cards_per_node)} <script>"
    return {"nemo": keys, "command": command}


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
        settings, more = torchtune_settings(scenario, plan, cards_per_node)
        notes += more
    elif fw is Framework.nemo:
        settings = nemo_settings(plan, cards_per_node)
    else:
        fsdp = fsdp_plugin(scenario, plan) if uses_fsdp(scenario, plan) else None
        settings = {"training_arguments": hf_arguments(scenario, plan)}
        loading = from_pretrained(scenario, plan)
        if loading is not None:
            settings["from_pretrained"] = loading
        settings["command"] = launcher(plan, fsdp)
        if fsdp is not None:
            settings["accelerate_fsdp"] = fsdp
        elif uses_deepspeed(scenario, plan):
            settings["ds_config.json"] = deepspeed_config(plan)
            if plan.zero_stage == 3:
                notes.append(_ZERO3_LOADING)
        if fsdp is not None and scenario.frozen_base_bits < 16 and plan.optimizer is OptimizerName.paged_adamw_8bit:
            notes.append("FSDP + QLoRA with paged_adamw_8bit fails when saving a checkpoint (peft accelerate/fsdp.md)")
    if notes:
        settings["notes"] = notes
    return settings

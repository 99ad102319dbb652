"""HF ``TrainingArguments``, ``from_pretrained`` keywords and the ``accelerate launch`` command for hf plans.

Checked against transformers 5.24 (``HfArgumentParser`` and the Trainer's DeepSpeed consistency checks), accelerate
1.15 (its launch parser and the launcher it picks), peft 0.21 and trl 1.16 (tests_real/test_hf.py). Oldest supported:
transformers 5.23.0, the first release with ``activation_checkpointing(_kwargs)`` (the names
``gradient_checkpointing(_kwargs)`` warn since then and go in v6; on older releases rename the two keys back).
Sources: huggingface/transformers src/transformers/training_args.py, integrations/deepspeed.py, trainer.py;
huggingface/accelerate src/accelerate/commands/launch.py; huggingface/peft docs/source/accelerate/deepspeed.md and
fsdp.md with examples/sft/run_peft_*.sh.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Checkpointing, Method, OptimizerKernel, OptimizerName, Precision, Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.ds_config import ds_declares_optimizer
from optimizer.launch.launch_common import (
    ACCELERATE_PRECISION,
    HF_ATTENTION,
    LR_SCHEDULE,
    MASTER_PORT,
    SGD_MOMENTUM,
    TORCH_DTYPE,
    flag,
    half_bf16,
    plan_attention,
    sharded,
    uses_deepspeed,
    uses_fsdp,
)

OLDEST_TRANSFORMERS = "5.23.0"
# TrainingArguments ``optim`` values (transformers training_args.py OptimizerNames)
HF_OPTIM = {
    OptimizerName.adamw: "adamw_torch_fused",
    OptimizerName.adamw_8bit: "adamw_bnb_8bit",
    OptimizerName.paged_adamw_8bit: "paged_adamw_8bit",
    OptimizerName.sgd: "sgd",
    OptimizerName.adafactor: "adafactor",
}


def hf_optim(scenario: Scenario, plan: Plan) -> str:
    """TrainingArguments ``optim`` for the plan.

    AdamW as ``training.optimizer_kernel`` asks: ``adamw_torch_fused`` by default, ``adamw_torch`` (torch's
    multi-tensor path) for foreach; the other optimizers by name (:data:`HF_OPTIM`).
    """
    foreach = scenario.training.optimizer_kernel is OptimizerKernel.foreach
    return "adamw_torch" if plan.optimizer is OptimizerName.adamw and foreach else HF_OPTIM[plan.optimizer]


def hf_optim_args(plan: Plan) -> str | None:
    """TrainingArguments ``optim_args`` for the plan: SGD's momentum (launch_common.SGD_MOMENTUM), else None.

    The Trainer's ``optim: sgd`` reads momentum only from ``optim_args`` (transformers trainer_optimizer.py
    _get_sgd); LLaMA-Factory passes TrainingArguments on, and Axolotl's ``optim_args`` reaches the same place.
    """
    return f"momentum={SGD_MOMENTUM}" if plan.optimizer is OptimizerName.sgd else None


def trainer_recomputes(scenario: Scenario, plan: Plan) -> bool:
    """Whether the Trainer's own activation checkpointing is on.

    Under FSDP full fine-tuning recomputes through fsdp_activation_checkpointing: the Trainer raises if both that and
    activation_checkpointing are true (transformers trainer.py "can't be set to True simultaneously"). PEFT's
    LoRA/QLoRA FSDP recipe keeps the Trainer's checkpointing instead (peft docs accelerate/fsdp.md).
    """
    recompute = plan.checkpointing is not Checkpointing.none
    return recompute and (scenario.method is not Method.full or not uses_fsdp(scenario, plan))


def use_reentrant(scenario: Scenario, plan: Plan) -> bool:
    """The activation checkpointing ``use_reentrant`` every HF-format file runs with.

    LoRA/QLoRA as PEFT's launch scripts set it: True for QLoRA under ZeRO-3 or FSDP
    (run_peft_qlora_deepspeed_stage3.sh, run_peft_qlora_fsdp.sh), False for LoRA under them and for QLoRA under DDP
    (run_peft_deepspeed.sh, run_peft_fsdp.sh, run_peft_multigpu.sh). Full fine-tuning: False, transformers 5's default
    (modeling_utils.py gradient_checkpointing_enable), which LLaMA-Factory (use_reentrant_gc, default True) must be
    told.
    """
    return scenario.method is not Method.full and scenario.frozen_base_bits < 16 and sharded(scenario, plan)


def accelerator_config(scenario: Scenario, plan: Plan) -> dict[str, Any] | None:
    """TrainingArguments ``accelerator_config`` for an FSDP plan priced with a reduce every micro-batch, else None.

    The Trainer accumulates under accelerator.no_sync (unsharded gradients held to the last micro-batch) unless
    accelerate's ``sync_each_batch`` reduce-scatters every micro-batch, which ``training.reduce_every_micro_batch``
    priced. LLaMA-Factory passes the dict to TrainingArguments and Axolotl to AcceleratorConfig
    (axolotl core/builders/base.py _configure_accelerator_config), so the three files write the same.
    """
    if uses_fsdp(scenario, plan) and scenario.training.reduce_every_micro_batch and plan.grad_accum > 1:
        return {"gradient_accumulation_kwargs": {"sync_each_batch": True}}
    return None


def hf_arguments(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """HF ``TrainingArguments`` (Trainer, TRL SFTTrainer, LLaMA-Factory accept the same names).

    Activation offloading is TRL ``SFTConfig``'s ``activation_offloading``, not the plain Trainer's: it is in
    :func:`sft_config` (a ``TrainingArguments(**training_arguments)`` would raise TypeError for it).
    """
    recompute = trainer_recomputes(scenario, plan)
    args: dict[str, Any] = {
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "activation_checkpointing": recompute,
        "bf16": half_bf16(plan),  # fp8 plans too: TrainingArguments has no fp8 switch (launch_common.half_bf16)
        "fp16": plan.precision is Precision.fp16,
        **LR_SCHEDULE,
    }
    if recompute and scenario.method is not Method.full:
        # PEFT's train.py passes use_reentrant as the checkpointing kwargs (use_reentrant())
        args["activation_checkpointing_kwargs"] = {"use_reentrant": use_reentrant(scenario, plan)}
    if not (uses_deepspeed(scenario, plan) and ds_declares_optimizer(plan)):
        # with "optimizer" in ds_config.json the Trainer ignores optim (DummyOptim), so printing one would contradict
        # the config: DeepSpeed steps DeepSpeedCPUAdam on the host
        args["optim"] = hf_optim(scenario, plan)
        if (extra := hf_optim_args(plan)) is not None:
            args["optim_args"] = extra
    if scenario.training.compile:
        args["torch_compile"] = True  # TrainingArguments torch_compile
    if uses_deepspeed(scenario, plan):
        args["deepspeed"] = "ds_config.json"
    sync = accelerator_config(scenario, plan)
    if sync is not None:
        args["accelerator_config"] = sync
    return args


def sft_config(scenario: Scenario) -> dict[str, Any]:
    """TRL ``SFTConfig`` keys beyond TrainingArguments': rows of ``seq_len`` tokens as the plan counts them.

    Packed, the plan's rows are samples concatenated and cut into full rows (DataSpec.packing): TRL's ``wrapped``
    strategy ("aggressive, cuts mid-sequence"); its default ``bfd`` leaves rows part-filled, cuts what overflows and
    turns on padding-free batches that need FlashAttention. Unpacked, ``max_length`` cuts longer samples (trl 1.16
    trl/trainer/sft_config.py max_length, packing, packing_strategy).
    """
    keys: dict[str, Any] = {"max_length": scenario.seq_len, "packing": scenario.data.packing}
    if scenario.data.packing:
        keys["packing_strategy"] = "wrapped"
    if scenario.training.activation_offload:
        keys["activation_offloading"] = True  # TRL SFTConfig only (huggingface/trl trl/trainer/sft_config.py)
    return keys


def load_dtype(scenario: Scenario, plan: Plan) -> str | None:
    """The dtype a 16-bit (not 4/8-bit) model is loaded in, as calibration ``profiles`` price it; None: the engine's.

    Without one, ``from_pretrained`` loads the checkpoint's own dtype (transformers ``dtype="auto"``), so a
    bf16-published model would train in pure bf16 (16-bit AdamW states) where the plan prices mixed precision, and
    a float16 one under fp16 would stop at the first step (the GradScaler refuses to unscale fp16 gradients):
    - full fine-tuning without DeepSpeed: fp32 master weights that the Trainer autocasts (profile ``hf``
      weight_bytes 6 = 4 + a 2-byte compute copy; ``hf_fsdp`` 4, FSDP's flat parameters keep the load dtype);
    - a LoRA base under FSDP: fp32 (``hf_fsdp`` frozen_base_bytes 4, PEFT examples/sft/utils.py), which also gives
      FSDP's flat parameters the one dtype they must have with the fp32 adapters;
    - a LoRA base otherwise: the plan's 16-bit compute dtype (``hf`` frozen_base_bytes 2);
    - under DeepSpeed: None, the engine casts the module to its own precision and keeps its fp32 master copy.
    fp32 plans load fp32. A 4/8-bit base: None here (:func:`from_pretrained` decides its storage dtype).
    """
    if scenario.frozen_base_bits != 16 or uses_deepspeed(scenario, plan):
        return None
    if plan.precision is Precision.fp32 or scenario.method is Method.full or uses_fsdp(scenario, plan):
        return "float32"
    return TORCH_DTYPE.get(plan.precision, "bfloat16")


def from_pretrained(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """``AutoModelForCausalLM.from_pretrained`` keyword arguments: attention kernel and, for a 4/8-bit base, loading.

    NF4 with double quantisation is the base the memory model prices (QLoRA paper; bitsandbytes defaults to fp4).
    Sharded (ZeRO-3 or FSDP), the packed weights must be stored in the model's float dtype, and ``dtype`` must match
    it: bfloat16 under bf16; float32 under fp16 "for stable automatic mixed precision" (peft accelerate/fsdp.md and
    deepspeed.md, examples/sft/utils.py). A 16-bit model is loaded in the dtype the memory model prices it in
    (:func:`load_dtype`).
    """
    kwargs: dict[str, Any] = {"attn_implementation": HF_ATTENTION[plan_attention(scenario, plan)]}
    bits = scenario.frozen_base_bits
    dtype = load_dtype(scenario, plan)
    if dtype is not None:
        kwargs["dtype"] = dtype  # transformers >= 4.56 name; torch_dtype before
    if bits == 8:
        kwargs["quantization_config"] = {"load_in_8bit": True}
    elif bits == 4:
        quant: dict[str, Any] = {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
            "bnb_4bit_compute_dtype": TORCH_DTYPE.get(plan.precision, "bfloat16"),
        }
        kwargs["quantization_config"] = quant
        if sharded(scenario, plan):
            storage = "float32" if plan.precision is Precision.fp16 else "bfloat16"
            quant["bnb_4bit_quant_storage"] = storage
            kwargs["dtype"] = storage  # transformers >= 4.56 name; torch_dtype before
    return kwargs


def launcher(scenario: Scenario, plan: Plan, fsdp: dict[str, Any] | None = None) -> str:
    """The accelerate command line for the plan's processes (all nodes) and machines.

    - FSDP: ``--use_fsdp`` and each ``--fsdp_*`` flag; without them ``accelerate launch`` starts plain data
      parallel, or whatever its default config file says.
    - DeepSpeed: ``--use_deepspeed --deepspeed_config_file ds_config.json`` on any card count, so accelerate takes
      its DeepSpeed launcher (torchrun underneath, which sets RANK, LOCAL_RANK and WORLD_SIZE). Without it one
      process runs through the simple launcher with no rank variables and DeepSpeed falls back to MPI discovery
      (accelerate commands/launch.py launch_command). Across nodes ``--deepspeed_multinode_launcher standard``
      keeps torchrun (the default, pdsh, needs passwordless ssh and a hostfile).
    """
    cmd = "accelerate launch"
    if fsdp is not None:
        cmd += " --use_fsdp " + " ".join(f"--{k} {flag(v)}" for k, v in fsdp.items())
        # the Trainer sets accelerate's mixed precision from its bf16/fp16 arguments, so fp8 is launched as bf16
        cmd += f" --mixed_precision {'bf16' if half_bf16(plan) else ACCELERATE_PRECISION[plan.precision]}"
    elif uses_deepspeed(scenario, plan):
        cmd += " --use_deepspeed --deepspeed_config_file ds_config.json"
        if plan.nodes > 1:
            cmd += " --deepspeed_multinode_launcher standard"
    elif plan.cards > 1:
        cmd += " --multi_gpu"
    cmd += f" --num_processes {plan.cards} --num_machines {plan.nodes}"
    if plan.nodes > 1:
        cmd += f" --machine_rank $NODE_RANK --main_process_ip $MASTER_ADDR --main_process_port {MASTER_PORT}"
    return cmd + " train.py"

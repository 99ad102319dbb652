"""Pieces every engine's launch settings share: which stack runs the plan, precision names, torchrun, LoRA, attention.

Checked against: torch 2.13 (torchrun), transformers 5.24, accelerate 1.15, peft 0.21 (the versions of
``.ci/launch-requirements.txt``, validated by ``tests_real/``).
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Attention, Framework, Method, ModelArch, Offload, Precision, Scenario, Sharding
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.lora_names import lora_config_targets, lora_names

# accelerate ``--mixed_precision`` choices: no | fp16 | bf16 | fp8 (accelerate commands/launch.py)
ACCELERATE_PRECISION = {Precision.bf16: "bf16", Precision.fp16: "fp16", Precision.fp8: "fp8", Precision.fp32: "no"}
# from_pretrained ``attn_implementation`` (transformers modeling_utils.py: "eager", "sdpa", "flash_attention_2")
HF_ATTENTION = {Attention.flash: "flash_attention_2", Attention.sdpa: "sdpa", Attention.eager: "eager"}
TORCH_DTYPE = {Precision.fp16: "float16"}  # anything else computes in bfloat16 (the QLoRA compute dtype)
MASTER_PORT = 29500  # torchrun's default --master_port
# SGD with momentum, as the memory model prices it (models/memory.py _state_bytes: one fp32 buffer, half of AdamW's
# states): torch.optim.SGD and the HF Trainer's optim "sgd" default to momentum 0 (no buffer); 0.9 is Megatron-Core's
# default (OptimizerConfig.sgd_momentum), which the NeMo export runs with
SGD_MOMENTUM = 0.9
# The learning-rate schedule of every HF-format file: transformers' default (TrainingArguments lr_scheduler_type
# "linear", warmup_steps 0), which LLaMA-Factory inherits; Axolotl's own default is cosine with 3% warm-up (axolotl
# utils/schemas/training.py lr_scheduler, core/builders/base.py _configure_warmup_and_logging), so it is told too.
# ftopt plans no schedule: one plan launches one schedule whichever file runs it.
LR_SCHEDULE = {"lr_scheduler_type": "linear", "warmup_steps": 0}
RDZV = f"--rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:{MASTER_PORT}"  # torchrun multi-node rendezvous


def half_bf16(plan: Plan) -> bool:
    """Whether the HF-format files train in bf16: a bf16 plan, and an fp8 one.

    transformers' TrainingArguments, DeepSpeed's config and LLaMA-Factory have bf16 and fp16 switches and none for
    fp8 (an fp8 plan written as neither trained in fp32), so an fp8 plan trains there in bf16, its non-fp8 part's
    precision; Axolotl adds its own ``fp8`` (axolotl_cfg.py) and the launch notes say so (by_engine.FP8_HF).
    """
    return plan.precision in (Precision.bf16, Precision.fp8)


def plan_attention(scenario: Scenario, plan: Plan) -> Attention:
    """The attention kernel the plan runs: ``Plan.attention``, else the scenario's request.

    The planner sets ``Plan.attention`` from the GPU (flash falls back to sdpa below sm80, models/attention.py).
    """
    return plan.attention or scenario.training.attention


def uses_deepspeed(scenario: Scenario, plan: Plan) -> bool:
    """Whether the hf plan runs under DeepSpeed (a ZeRO stage or an offload with ``sharding: deepspeed``)."""
    hf = scenario.training.framework is Framework.hf and scenario.training.sharding is Sharding.deepspeed
    return hf and (plan.zero_stage > 0 or plan.offload is not Offload.none)


def uses_fsdp(scenario: Scenario, plan: Plan) -> bool:
    """Whether the hf plan runs under accelerate's FSDP (a ZeRO stage with ``sharding: fsdp``)."""
    hf = scenario.training.framework is Framework.hf and scenario.training.sharding is Sharding.fsdp
    return hf and plan.zero_stage > 0


def sharded(scenario: Scenario, plan: Plan) -> bool:
    """Parameters sharded across ranks: FSDP, or DeepSpeed ZeRO-3."""
    return uses_fsdp(scenario, plan) or (uses_deepspeed(scenario, plan) and plan.zero_stage == 3)


def peft_lora_config(scenario: Scenario, arch: ModelArch | None = None) -> dict[str, Any] | None:
    """``peft.LoraConfig`` keyword arguments for a LoRA/QLoRA scenario (None for full fine-tuning).

    The targets as ``arch`` names them (lora_names.py): an MoE model's routed experts are ``target_parameters``.
    """
    spec = scenario.lora_spec
    if scenario.method is Method.full or spec is None:
        return None
    return {
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": spec.dropout,
        **lora_config_targets(lora_names(scenario, arch)),
        "task_type": "CAUSAL_LM",
    }


def flag(value: Any) -> str:
    """A value as accelerate's command line reads it (booleans as true/false)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def torchrun_args(plan: Plan, cards_per_node: int) -> str:
    """The torchrun node and process counts, with a c10d rendezvous when the plan spans nodes."""
    args = f"--nnodes {plan.nodes} --nproc_per_node {min(plan.cards, cards_per_node)}"
    return args + (f" {RDZV}" if plan.nodes > 1 else "")

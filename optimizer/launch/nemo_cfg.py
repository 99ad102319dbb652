"""NeMo 2 / Megatron-Core settings, grouped by the config class that takes them.

Checked against megatron-core 0.16.1 (tests_real/test_nemo.py builds ``TransformerConfig``,
``DistributedDataParallelConfig`` and ``OptimizerConfig`` from these groups and runs their ``__post_init__``
checks). Sources: NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py (recompute_*, fp8,
attention_backend), megatron/core/distributed/distributed_data_parallel_config.py (use_distributed_optimizer,
use_megatron_fsdp, data_parallel_sharding_strategy), megatron/core/optimizer/optimizer_config.py and
optimizer/__init__.py (optimizer_cpu_offload through HybridDeviceOptimizer); NVIDIA/NeMo
nemo/collections/llm/recipes/CONFIGURATION-HIERARCHY.md (MegatronStrategy, MegatronMixedPrecision, LoRA).
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Attention, Checkpointing, Method, Offload, OptimizerName, Precision, Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.launch_common import plan_attention, torchrun_args

# NeMo 2 MegatronMixedPrecision ``precision``: "16-mixed" | "bf16-mixed" | "32"; FP8 runs on top of bf16-mixed
NEMO_PRECISION = {
    Precision.bf16: "bf16-mixed",
    Precision.fp16: "16-mixed",
    Precision.fp32: "32",
    Precision.fp8: "bf16-mixed",
}
# ModelParallelConfig pipeline_dtype (the dtype of the activations sent between stages; megatron-core raises "When
# using pipeline parallelism, pipeline_dtype must be specified" for pp > 1 without it), as the torch dtype's name:
# NeMo 2 MegatronStrategy(pipeline_dtype=torch.<name>). fp8 runs on bf16 activations.
PIPELINE_DTYPE = {Precision.bf16: "bfloat16", Precision.fp16: "float16", Precision.fp32: "float32",
                  Precision.fp8: "bfloat16"}  # fmt: skip
# TransformerConfig attention_backend (megatron/core/transformer/enums.py AttnBackend): Megatron has no torch-SDPA
# path, so sdpa leaves the choice to Megatron (auto); eager is its unfused PyTorch attention
# fused: TransformerEngine's cuDNN fused attention, which the time model prices for nemo (calibration
# fused_attention_engines); "flash" would set NVTE_FUSED_ATTN=0 (megatron/core/models/common/language_module/
# language_module.py) and run the flash-attn kernel instead
ATTENTION_BACKEND = {Attention.flash: "fused", Attention.sdpa: "auto", Attention.eager: "unfused"}
# ZeRO stage -> Megatron data-parallel sharding: stage 1 is the distributed optimizer; 2 and 3 are Megatron FSDP
# with gradients (and parameters) sharded too
SHARDING_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}
# HF module names -> Megatron's LoRA target_modules (NeMo nemo/collections/llm/peft/lora.py). In an MoE model the
# experts' Linears are linear_fc1 (gate and up fused) and linear_fc2 too (mlp.experts.local_experts.<i>.linear_fc1;
# NeMo peft/utils.py is_expert_linear), so these names adapt every expert, as models/memory.py lora_params counts
# them; the router (mlp.router) has no name here
_LORA_TARGETS = {"q_proj": "linear_qkv", "k_proj": "linear_qkv", "v_proj": "linear_qkv", "o_proj": "linear_proj",
                 "gate_proj": "linear_fc1", "up_proj": "linear_fc1", "down_proj": "linear_fc2"}  # fmt: skip
MEGATRON_OPTIMIZER = {OptimizerName.adamw: "adam", OptimizerName.sgd: "sgd"}  # the two Megatron-Core builds


def transformer_config(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """TransformerConfig keys: recomputation, FP8, attention kernel."""
    keys: dict[str, Any] = {
        "recompute_granularity": None if plan.checkpointing is Checkpointing.none else plan.checkpointing.value,
        "attention_backend": ATTENTION_BACKEND[plan_attention(scenario, plan)],
    }
    if plan.checkpointing is Checkpointing.full:
        # TransformerConfig raises for full recomputation without a method and a layer count; uniform over groups of
        # one layer recomputes every layer from its input
        keys["recompute_method"] = "uniform"
        keys["recompute_num_layers"] = 1
    if plan.precision is Precision.fp8:
        keys["fp8"] = "hybrid"  # "e4m3" | "hybrid" (E4M3 forward, E5M2 gradients)
    if plan.zero_stage >= 2:  # Megatron FSDP requires it off (Megatron-LM megatron-fsdp-user-guide.md)
        keys["gradient_accumulation_fusion"] = False
    return keys


def ddp_config(plan: Plan) -> dict[str, Any]:
    """DistributedDataParallelConfig keys: ZeRO-1 as the distributed optimizer, ZeRO-2/3 as Megatron FSDP."""
    keys: dict[str, Any] = {"use_distributed_optimizer": plan.zero_stage >= 1}
    if plan.zero_stage >= 2:
        keys["use_megatron_fsdp"] = True
        keys["data_parallel_sharding_strategy"] = SHARDING_STRATEGY[plan.zero_stage]
    return keys


def optimizer_config(plan: Plan) -> dict[str, Any]:
    """OptimizerConfig keys: the optimizer, the distributed optimizer and CPU offload of its states and step.

    ``optimizer_cpu_offload`` with ``optimizer_offload_fraction`` 1.0 keeps every state on the CPU and steps it there
    (HybridDeviceOptimizer, megatron/core/optimizer/__init__.py); it needs decoupled weight decay (AdamW mode, the
    default) and the distributed optimizer, the one wrapper that accepts it (distrib_optimizer.py "Only Adam and
    HybridDeviceOptimizer currently supported"), hence ZeRO stage 1 (calibration.yaml frameworks.offload_modes).
    With Adam it takes ``use_precision_aware_optimizer`` too: Megatron-LM's argument check requires it ("optimizer
    cpu offload must be used in conjunction with --use-precision-aware-optimizer"; megatron/core/optimizer/
    cpu_offloading/README.md lists the three flags), and without it the distributed optimizer keeps an fp32 main
    copy of its shard on the GPU (distrib_optimizer.py "Generate main param" unless
    use_precision_aware_optimizer_no_fp8_or_ds_fp8, which offload turns on) beside the HybridDeviceOptimizer's on the
    host, memory the plan gave back. OptimizerConfig accepts it with adam only (optimizer_config.py __post_init__).
    """
    keys: dict[str, Any] = {
        "optimizer": MEGATRON_OPTIMIZER.get(plan.optimizer, plan.optimizer.value),
        "use_distributed_optimizer": plan.zero_stage >= 1,
    }
    if plan.offload is not Offload.none:
        keys["optimizer_cpu_offload"] = True
        keys["optimizer_offload_fraction"] = 1.0
        if keys["optimizer"] == "adam":
            keys["use_precision_aware_optimizer"] = True
    return keys


def data_module(scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """NeMo 2 ``FineTuningDataModule`` keys: sequence length, batch sizes and sequence packing.

    Packed, NeMo takes micro-batch 1 only and names the equivalent of m rows of s tokens: one row of m x s tokens
    (``PackedSequenceSpecs.packed_sequence_size``) and the global batch divided by m (NVIDIA/NeMo
    nemo/collections/llm/gpt/data/fine_tuning.py validate_batch_size_for_packed_sequence). Packed, ``seq_length`` is
    that row's length too: the dataset takes it as ``max_seq_length`` and its collate function cuts the pack and its
    ``cu_seqlens`` there, and NVIDIA's packing examples set the two equal (Megatron-Bridge packed-sequences docs:
    seq_length = packed_sequence_size). Unpacked, it is where a longer sample is cut.
    """
    rows = plan.micro_batch * plan.grad_accum * plan.dp
    if not scenario.data.packing:
        return {"seq_length": scenario.seq_len, "micro_batch_size": plan.micro_batch, "global_batch_size": rows}
    return {
        "seq_length": scenario.seq_len * plan.micro_batch,
        "micro_batch_size": 1,
        "global_batch_size": rows // plan.micro_batch,
        "packed_sequence_specs": {"packed_sequence_size": scenario.seq_len * plan.micro_batch},
    }


def packing_note(scenario: Scenario, plan: Plan) -> str | None:
    """Why packed data reads seq_len x m and global batch / m (:func:`data_module`); None when nothing changes."""
    m = plan.micro_batch
    if not scenario.data.packing or m == 1:
        return None
    rows, s = m * plan.grad_accum * plan.dp, scenario.seq_len
    return (f"data (packed): NeMo packs the micro-batch's {m} sequences into one row and takes micro_batch_size 1, "
            f"so seq_length {s * m} = seq_len {s} x micro_batch {m} and "
            f"global_batch_size {rows // m} = global batch {rows} / {m}; tokens per step are the plan's "
            f"({rows // m} x {s * m:,} = {rows} x {s:,} = {rows * s:,})")  # fmt: skip


def lora_notes(scenario: Scenario) -> list[str]:
    """What NeMo's LoRA adapts differently from the scenario's targets (Megatron fuses q/k/v and gate/up)."""
    spec = scenario.lora_spec
    names = set() if scenario.method is Method.full or spec is None else {str(t) for t in spec.targets}
    if not names or "all-linear" in names and "lm_head" not in names:
        return []
    notes = []
    if "lm_head" in names:
        notes.append("NeMo 2 LoRA adapts linear_qkv, linear_proj, linear_fc1 and linear_fc2 only: the lm_head adapter "
                     "the plan priced is left off")  # fmt: skip
    for fused, group in (("linear_qkv", {"q_proj", "k_proj", "v_proj"}), ("linear_fc1", {"gate_proj", "up_proj"})):
        asked = names & group
        if "all-linear" not in names and asked and asked != group:
            notes.append(f"NeMo's {fused} fuses {', '.join(sorted(group))}: adapting it adapts all of them, not only "
                         f"{', '.join(sorted(asked))}")  # fmt: skip
    return notes


def lora_peft(scenario: Scenario) -> dict[str, Any] | None:
    """NeMo 2 ``llm.peft.LoRA`` arguments (dim, alpha, dropout, target_modules) for a LoRA scenario."""
    spec = scenario.lora_spec
    if scenario.method is Method.full or spec is None:
        return None
    names = [str(t) for t in spec.targets]
    every = "all-linear" in names
    targets = sorted(set(_LORA_TARGETS.values()) if every else {_LORA_TARGETS[t] for t in names if t in _LORA_TARGETS})
    return {"dim": spec.rank, "alpha": spec.alpha, "dropout": spec.dropout, "target_modules": targets}


def nemo_settings(scenario: Scenario, plan: Plan, cards_per_node: int) -> tuple[dict[str, Any], list[str]]:
    """NeMo 2 settings (strategy, model, DDP, optimizer, data, precision, LoRA), the command and notes."""
    notes: list[str] = []
    strategy: dict[str, Any] = {"tensor_model_parallel_size": plan.tp, "pipeline_model_parallel_size": plan.pp}
    if plan.tp > 1:  # the memory model divides every activation by t (sequence parallelism); NeMo's default is off
        strategy["sequence_parallel"] = True
    if plan.zero_stage >= 2:
        # Megatron FSDP: MegatronStrategy raises NotImplementedError for it with the default torch_dist checkpoint
        # format (NVIDIA/NeMo nemo/lightning/pytorch/strategies/megatron_strategy.py); fsdp_dtensor is the format
        # Megatron-FSDP saves (Megatron-LM megatron-fsdp-user-guide.md "--ckpt-format fsdp_dtensor")
        strategy["fsdp"] = "megatron"
        strategy["save_ckpt_format"] = "fsdp_dtensor"
    if plan.pp > 1:
        dtype = strategy["pipeline_dtype"] = PIPELINE_DTYPE[plan.precision]
        notes.append(f"pipeline_dtype is the name of a torch dtype: pass torch.{dtype}")
    if plan.virtual_pipeline > 1:  # the interleaved schedule the time model priced (models/pipeline.py)
        strategy["virtual_pipeline_model_parallel_size"] = plan.virtual_pipeline
    keys: dict[str, Any] = {
        "strategy": strategy,
        "transformer_config": transformer_config(scenario, plan),
        "ddp": ddp_config(plan),
        "optimizer": optimizer_config(plan),
        "data": data_module(scenario, plan),
        "precision": NEMO_PRECISION[plan.precision],
    }
    if plan.precision is Precision.fp8:
        # NeMo's MegatronStrategy copies the precision plugin's DtypeConfig onto the model config, fp8 included, so a
        # bf16-mixed plugin overwrites transformer_config.fp8 with None (nemo/lightning/pytorch/strategies/
        # megatron_strategy.py, plugins/mixed_precision.py): fp8 must be on the plugin
        keys["precision_plugin"] = "bf16_with_fp8_mixed"
        notes.append("fp8: use nemo.collections.llm.recipes.precision.mixed_precision.bf16_with_fp8_mixed() as the "
                     "trainer's precision plugin; NeMo copies the plugin's fp8 onto the model config, so "
                     "transformer_config.fp8 alone is overwritten by a bf16-mixed plugin and the run trains in bf16")
    notes.append("attention_backend names megatron.core.transformer.enums.AttnBackend: pass "
                 f"AttnBackend.{keys['transformer_config']['attention_backend']} (a plain string matches no backend "
                 "and is ignored)")  # fmt: skip
    packed = packing_note(scenario, plan)
    if packed is not None:
        notes.append(packed)
    peft = lora_peft(scenario)
    if peft is not None:
        keys["peft"] = peft
        notes += lora_notes(scenario)
    if scenario.frozen_base_bits < 16:
        notes.append("NeMo 2 LoRA trains over a 16-bit base: it has no 4/8-bit (QLoRA) base")
    if plan.offload is not Offload.none and plan.optimizer is OptimizerName.sgd:
        notes.append("Megatron-Core's CPU offload of SGD runs without use_precision_aware_optimizer (adam only): the "
                     "distributed optimizer keeps its fp32 main parameters on the GPU, and Megatron-LM's own "
                     "arguments refuse offload without it")  # fmt: skip
    if plan.optimizer not in MEGATRON_OPTIMIZER:
        notes.append(f"Megatron-Core builds adam or sgd only: {plan.optimizer.value} does not run under NeMo")
    command = f"torchrun {torchrun_args(plan, cards_per_node)} <script>"
    return {"nemo": keys, "command": command}, notes

"""torchtune recipe overrides and the ``tune run`` command.

Checked against torchtune 0.6.1 with torch 2.13 (tests_real/test_torchtune.py: OmegaConf merge into the shipped
recipe configs, the recipes' own start-up checks, the model builder's signature). Sources:
pytorch/torchtune recipes/full_finetune_distributed.py, lora_finetune_distributed.py, full_finetune_single_device.py,
lora_finetune_single_device.py (one card without offloading: :func:`recipe_name`), recipes/configs/*,
torchtune/models/*/_model_builders.py.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.catalog import base_model_name
from optimizer.inputs.schema import (
    Checkpointing,
    Framework,
    Method,
    Offload,
    OptimizerKernel,
    OptimizerName,
    Scenario,
)
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.launch_common import SGD_MOMENTUM, torchrun_args
from optimizer.launch.lora_names import scenario_targets

# catalog model name (lower case) -> (torchtune.models module, base builder); the LoRA builder is "lora_" + base and
# the QLoRA builder "qlora_" + base where the module defines one (torchtune 0.6.1 torchtune/models/*/_model_builders.py)
BUILDERS = {
    "llama-2-7b": ("llama2", "llama2_7b"),
    "llama-2-13b": ("llama2", "llama2_13b"),
    "llama-2-70b": ("llama2", "llama2_70b"),
    "llama-3.1-8b": ("llama3_1", "llama3_1_8b"),
    "llama-3.1-70b": ("llama3_1", "llama3_1_70b"),
    "llama-3.1-405b": ("llama3_1", "llama3_1_405b"),
    "llama-3.2-3b": ("llama3_2", "llama3_2_3b"),
    "mistral-7b-v0.1": ("mistral", "mistral_7b"),
    "qwen2.5-7b": ("qwen2_5", "qwen2_5_7b_base"),
    "qwen2.5-14b": ("qwen2_5", "qwen2_5_14b_base"),
    "qwen2.5-32b": ("qwen2_5", "qwen2_5_32b_base"),
    "qwen2.5-72b": ("qwen2_5", "qwen2_5_72b_base"),
}
# torchtune 0.6.1 defines qlora_* builders for the llama2, llama3_1, llama3_2 and mistral modules, none for qwen2_5
QLORA_MODULES = frozenset({"llama2", "llama3_1", "llama3_2", "mistral"})
# HF attention projection names -> torchtune's lora_attn_modules names (torchtune/models/llama3_1 lora builders)
_ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}
_MLP = {"gate_proj", "up_proj", "down_proj"}
OPTIMIZER_COMPONENT = {
    OptimizerName.adamw: "torch.optim.AdamW",
    OptimizerName.sgd: "torch.optim.SGD",
    OptimizerName.adamw_8bit: "bitsandbytes.optim.AdamW8bit",
    OptimizerName.paged_adamw_8bit: "bitsandbytes.optim.PagedAdamW8bit",
    OptimizerName.adafactor: "transformers.optimization.Adafactor",
}


def optimizer_block(name: OptimizerName, kernel: OptimizerKernel = OptimizerKernel.fused) -> dict[str, Any]:
    """The recipe's ``optimizer`` component.

    torch AdamW runs fused (``fused: True``) unless the scenario asks for torch's default multi-tensor path
    (``training.optimizer_kernel: foreach``, ``fused: False``): one kernel per parameter group instead of one
    ``_foreach_*`` op per arithmetic step, which keeps a temporary copy of the second moment for each step
    (torchtune's own configs turn ``foreach`` off for that memory) and moves 20/7 of the fused kernel's traffic
    (calibration ``optimizer_tensor_passes``, docs/time-model.md). The HF launch files ask for the same kernel
    (``optim: adamw_torch_fused``, or ``adamw_torch`` for foreach).
    """
    block: dict[str, Any] = {"_component_": OPTIMIZER_COMPONENT[name]}
    if name is OptimizerName.adamw:
        block["fused"] = kernel is OptimizerKernel.fused
    if name is OptimizerName.sgd:
        block["momentum"] = SGD_MOMENTUM  # torch's SGD defaults to none; the plan prices its buffer
        # the recipe configs' AdamW block carries fused: True, which the merge keeps; torch's fused SGD has no
        # sharding rule for FSDP2's DTensors (aten._fused_sgd_ "does not have a sharding strategy registered",
        # torch/distributed/tensor/_ops/_pointwise_ops.py registers the fused Adam/AdamW ops only)
        block["fused"] = False
    if name is OptimizerName.adafactor:
        # transformers' Adafactor raises for a manual lr (the recipe configs set one) with its default relative_step;
        # the HF Trainer's optim=adafactor turns both schedule-free defaults off the same way (trainer.py)
        block.update(relative_step=False, scale_parameter=False, warmup_init=False)
    return block


# Optimizers whose constructor has no ``fused`` argument: the recipe configs' torch AdamW block carries
# ``fused: True``, which a ``tune run`` override merges into, not replaces (torchtune/config/_utils.py
# _merge_yaml_and_cli_args: OmegaConf.merge), so the command removes it (``~optimizer.fused``)
NO_FUSED_ARG = frozenset({OptimizerName.adamw_8bit, OptimizerName.paged_adamw_8bit, OptimizerName.adafactor})


def builder_entry(name: str) -> tuple[str, str] | None:
    """(torchtune.models module, base builder) for a catalog name or a variant of one, None when unknown.

    Instruction-tuned and chat variants (``-Instruct``, ``-chat-hf``, an organisation prefix; catalog.base_model_name)
    keep their base model's builder, except Qwen2.5, whose instruct checkpoints have builders of their own
    (qwen2_5_<size>_instruct beside qwen2_5_<size>_base).
    """
    base = base_model_name(name, BUILDERS)
    if base is None:
        return None
    module, builder = BUILDERS[base]
    if module == "qwen2_5" and "instruct" in name.lower() and builder.endswith("_base"):
        builder = builder.removesuffix("_base") + "_instruct"
    return module, builder


def qlora_refusal(scenario: Scenario) -> tuple[str, str] | None:
    """(field, problem) when torchtune has no QLoRA builder for the scenario's model (QLORA_MODULES), else None.

    A plan for it could not be launched: the recipe would have no ``qlora_*`` model component to build.
    """
    if scenario.training.framework is not Framework.torchtune or scenario.method is not Method.qlora:
        return None
    entry = builder_entry(scenario.model) if isinstance(scenario.model, str) else None
    if entry is None or entry[0] in QLORA_MODULES:
        return None  # an unknown model gets its builder note; the user names the component
    return ("method", f"torchtune 0.6.1 has no QLoRA builder for {scenario.model} (no qlora_{entry[1]}); "
            "allowed: lora or full under torchtune, or qlora under framework hf")


def model_component(scenario: Scenario) -> tuple[dict[str, Any], list[str]]:
    """The ``model`` block (builder and LoRA keys) and what cannot be built as planned."""
    entry = builder_entry(scenario.model) if isinstance(scenario.model, str) else None
    notes: list[str] = []
    block: dict[str, Any] = {}
    if entry is None:
        notes.append("torchtune: no known builder for this model; set model._component_ to its torchtune builder")
    else:
        module, base = entry
        prefix = {Method.full: "", Method.lora: "lora_", Method.qlora: "qlora_"}[scenario.method]
        block["_component_"] = f"torchtune.models.{module}.{prefix}{base}"
    spec = scenario.lora_spec
    if scenario.method is not Method.full and spec is not None:
        targets = scenario_targets(scenario)
        every = "all-linear" in targets
        block["lora_attn_modules"] = list(_ATTN.values()) if every else [_ATTN[t] for t in targets if t in _ATTN]
        block["apply_lora_to_mlp"] = every or any(t in _MLP for t in targets)
        mlp = set() if every else {t for t in targets if t in _MLP}
        if mlp and mlp != _MLP:
            notes.append(f"torchtune adapts all three MLP projections (apply_lora_to_mlp), not only "
                         f"{', '.join(sorted(mlp))}: more adapters than the plan priced")  # fmt: skip
        output = "lm_head" in targets  # all-linear names the projections only: lm_head is asked for by name
        tied = entry is not None and entry[0] == "llama3_2"  # its 1B/3B builders raise: the output is tied
        block["apply_lora_to_output"] = output and not tied
        if output and tied:
            notes.append(f"torchtune's {entry[0]} builders refuse LoRA on the output layer (tied to the embeddings): "
                         "the lm_head adapter the plan priced is left off")  # fmt: skip
        block["lora_rank"] = spec.rank
        block["lora_alpha"] = spec.alpha
        block["lora_dropout"] = spec.dropout
    return block, notes


def recipe_name(scenario: Scenario, plan: Plan) -> str:
    """The torchtune recipe: ``full_finetune_*`` or ``lora_finetune_*`` (LoRA and QLoRA), ``*_single_device``.

    ``single_device`` on one card without offloading, else ``distributed`` (FSDP2, whose CPU offload a one-card
    LoRA plan may use).
    """
    kind = "full" if scenario.method is Method.full else "lora"
    single = plan.cards == 1 and plan.offload is Offload.none
    return f"{kind}_finetune_{'single_device' if single else 'distributed'}"


def torchtune_settings(scenario: Scenario, plan: Plan, cards_per_node: int) -> tuple[dict[str, Any], list[str]]:
    """The torchtune recipe overrides, the ``tune run`` command, and what the recipe cannot do as planned.

    The recipe (:func:`recipe_name`): the single-device one on one card without offloading, as torchtune's own
    one-GPU configs run (they alone step bitsandbytes' 8-bit optimizers); the distributed one (FSDP2) otherwise.
    """
    t = scenario.training
    full = scenario.method is Method.full
    recompute = plan.checkpointing is not Checkpointing.none
    recipe = recipe_name(scenario, plan)
    model, notes = model_component(scenario)
    keys: dict[str, Any] = {
        "model": model,
        "optimizer": optimizer_block(plan.optimizer, t.optimizer_kernel),
        "batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "enable_activation_checkpointing": recompute,
        # the recipes raise for offloading without checkpointing (full_finetune_distributed.py __init__)
        "enable_activation_offloading": t.activation_offload and recompute,
    }
    if recipe.endswith("_distributed"):  # FSDP2's keys; the single-device recipes read neither
        keys["fsdp_cpu_offload"] = plan.offload is not Offload.none
        keys["fsdp_reshard_after_forward"] = plan.zero_stage >= 3  # False = SHARD_GRAD_OP (recipe docstring)
    keys.update({
        "compile": t.compile,
        "dtype": plan.precision.value,
        # rows of seq_len tokens as the plan counts them: packed datasets concatenate samples into full rows (the
        # recipes raise for packed without tokenizer.max_seq_len); unpacked, max_seq_len cuts longer samples
        "dataset": {"packed": scenario.data.packing},
        "tokenizer": {"max_seq_len": scenario.seq_len},
    })  # fmt: skip
    if full:
        # full-fine-tuning recipes only; they raise for it with gradient accumulation or gradient clipping
        in_bwd = t.optimizer_in_backward and plan.grad_accum == 1
        keys["optimizer_in_bwd"] = in_bwd
        if in_bwd:
            keys["clip_grad_norm"] = None
        elif t.optimizer_in_backward:
            notes.append("optimizer_in_bwd needs gradient_accumulation_steps 1 (the recipe raises): left off")
    if t.activation_offload and not recompute:
        notes.append("enable_activation_offloading needs enable_activation_checkpointing (the recipe raises): "
                     "left off")  # fmt: skip
    if plan.checkpointing is Checkpointing.selective:
        notes.append(
            "torchtune 0.6 has no per-operator selective checkpointing (its ac_mode 'selective' recomputes "
            "every n-th whole layer): full checkpointing is set, which needs less memory, more time"
        )
    if full and plan.offload is not Offload.none and plan.dp == 1:
        notes.append(f"{recipe} applies FSDP, and so fsdp_cpu_offload, only with more than one data-parallel rank: "
                     "on one GPU the offload this plan relies on does not happen")  # fmt: skip
    launch = "" if recipe.endswith("_single_device") else f"{torchrun_args(plan, cards_per_node)} "
    command = f"tune run {launch}{recipe} --config <config>"
    if plan.optimizer in NO_FUSED_ARG and recipe != "full_finetune_single_device":
        # the shipped configs' fused: True would reach a constructor without it; the full single-device configs
        # (llama3_1/8B_full_single_device.yaml and most others) step a bitsandbytes optimizer and carry no fused key,
        # which tune run could not remove (torchtune/config/_utils.py _remove_key_by_dotpath: KeyError)
        command += " ~optimizer.fused"
        notes.append(f"{OPTIMIZER_COMPONENT[plan.optimizer]} takes no fused argument: the command removes the recipe "
                     "config's optimizer.fused (~optimizer.fused); a config of your own without that key needs "
                     "no removal")  # fmt: skip
    elif plan.optimizer in NO_FUSED_ARG:
        notes.append(f"{OPTIMIZER_COMPONENT[plan.optimizer]} takes no fused argument: torchtune's full single-device "
                     "configs carry none; with a config of your own that sets optimizer.fused, add ~optimizer.fused "
                     "to the command")  # fmt: skip
    return {"torchtune": keys, "command": command}, notes

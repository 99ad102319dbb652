"""The launch settings of a plan for the scenario's engine, as plain data (what ``--launch-dir`` writes).

hf plans get HF TrainingArguments, from_pretrained and PEFT LoraConfig keywords, an accelerate command, DeepSpeed
JSON or FSDP flags, and a LLaMA-Factory export; torchtune and nemo plans get their own keys. The files of their own
(ds_config.json, llamafactory.yaml, ...) come from the registry in exporters.py. The engine modules beside
this one state the library versions they were checked against.
"""

from __future__ import annotations

import math
from typing import Any

from optimizer.inputs.schema import (
    Checkpointing,
    Framework,
    Loss,
    ModelArch,
    OptimizerName,
    Precision,
    Scenario,
)
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.axolotl_cfg import CONFIG_FILE as AXOLOTL_FILE
from optimizer.launch.axolotl_cfg import axolotl_command, axolotl_notes
from optimizer.launch.exporters import file_exports
from optimizer.launch.fsdp_args import fsdp_plugin
from optimizer.launch.hf_args import OLDEST_TRANSFORMERS, from_pretrained, hf_arguments, launcher, sft_config
from optimizer.launch.launch_common import peft_lora_config, uses_deepspeed, uses_fsdp
from optimizer.launch.llamafactory_cfg import LLAMAFACTORY_NO_ACT_OFFLOAD, LLAMAFACTORY_PACKING, llamafactory_settings
from optimizer.launch.lora_names import llamafactory_notes, lora_names
from optimizer.launch.nemo_cfg import nemo_settings
from optimizer.launch.torchtune_cfg import torchtune_settings

ZERO3_LOADING = (
    "build TrainingArguments(deepspeed='ds_config.json') before from_pretrained: transformers then loads the model "
    "already partitioned (deepspeed.zero.Init) instead of whole on every rank (transformers "
    "integrations/deepspeed.py is_deepspeed_zero3_enabled)"
)

ZERO3_KBIT_LOADING = (
    "a 4/8-bit base is built outside deepspeed.zero.Init and loads whole on every GPU before DeepSpeed partitions "
    "it (transformers modeling_utils.py: no zero.Init for quantised models); the plan fits that load as well"
)

FP8_HF = (
    "fp8: axolotl.yaml trains the fp8 matmuls this plan is priced with (fp8: true, torchao float8 on top of bf16; "
    "under FSDP every rank then reads the checkpoint, as accelerate refuses torchao with cpu_ram_efficient_loading); "
    "TrainingArguments, ds_config.json and LLaMA-Factory have no fp8 switch, so those files train in bf16, slower "
    "than priced (pin precision: bf16 for a plan they launch as priced)"
)

MOE_ZERO3 = (
    "ZeRO-3 with an MoE model: the router sends each rank's tokens to different experts, so the ranks fetch different "
    "partitioned parameters and can hang; before training call deepspeed.utils.set_z3_leaf_modules(model, [<the "
    "model's sparse MoE block class>]) so each MoE block is gathered whole (LLaMA-Factory does this itself: "
    "model_utils/moe.py add_z3_leaf_module)"
)

HF_SELECTIVE = (
    "transformers, LLaMA-Factory and Axolotl recompute whole layers (activation_checkpointing): this selective plan "
    "is priced as PyTorch per-op selective checkpointing (torchtitan's policy: every other matmul recomputed), "
    "which these files cannot ask for; they set full recomputation, which needs less memory and more time "
    "(leave checkpointing unpinned for a plan the files launch as priced)"
)


def hf_settings(scenario: Scenario, plan: Plan, cards_per_node: int,
                arch: ModelArch | None = None) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """TrainingArguments, from_pretrained, LoraConfig, command, DeepSpeed/FSDP settings and the LLaMA-Factory export.

    ``arch`` names the LoRA targets (an MoE model's experts are parameters: lora_names.py); None: the scenario's.
    """
    names = lora_names(scenario, arch)
    notes: list[str] = [*names.notes, *llamafactory_notes(names)]
    fsdp = fsdp_plugin(scenario, plan) if uses_fsdp(scenario, plan) else None
    settings: dict[str, Any] = {
        "training_arguments": hf_arguments(scenario, plan),
        "from_pretrained": from_pretrained(scenario, plan),
        "sft_config": sft_config(scenario),
    }
    lora = peft_lora_config(scenario, arch)
    if lora is not None:
        settings["lora_config"] = lora
    settings["command"] = launcher(scenario, plan, fsdp)
    if fsdp is not None:
        settings["accelerate_fsdp"] = fsdp
        if scenario.frozen_base_bits < 16 and plan.optimizer is OptimizerName.paged_adamw_8bit:
            notes.append("FSDP + QLoRA with paged_adamw_8bit fails when saving a checkpoint (peft accelerate/fsdp.md)")
    elif uses_deepspeed(scenario, plan) and plan.zero_stage == 3:
        notes.append(ZERO3_LOADING if scenario.frozen_base_bits == 16 else ZERO3_KBIT_LOADING)
        if arch is not None and arch.experts > 1:
            notes.append(MOE_ZERO3)
    if plan.precision is Precision.fp8:
        notes.append(FP8_HF)
    if plan.checkpointing is Checkpointing.selective:
        notes.append(HF_SELECTIVE)
    lf = llamafactory_settings(scenario, plan, cards_per_node, fsdp)
    settings["llamafactory"] = {"environment": lf["environment"], "command": lf["command"]}
    settings["axolotl"] = {"command": axolotl_command(plan, cards_per_node)}
    notes += axolotl_notes(scenario, plan)
    if scenario.data.packing:
        notes.append(LLAMAFACTORY_PACKING.format(seq_len=scenario.seq_len))
    if scenario.training.activation_offload:
        notes.append(LLAMAFACTORY_NO_ACT_OFFLOAD)
    notes.append("sft_config: TRL SFTConfig keys on top of training_arguments; with the plain Trainer, pack or cut "
                 f"the dataset into rows of {scenario.seq_len} tokens yourself")  # fmt: skip
    notes.append(f"training_arguments use transformers >= {OLDEST_TRANSFORMERS} names; before it write "
                 "activation_checkpointing(_kwargs) as gradient_checkpointing(_kwargs)")  # fmt: skip
    return settings, notes


def launch_settings(scenario: Scenario, plan: Plan, cards_per_node: int, save_steps: int | None = None,
                    arch: ModelArch | None = None, steps: int | None = None,
                    checkpoints_kept: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Everything needed to start the plan with the scenario's framework, as plain data.

    ``save_steps``: optimizer steps between the checkpoint saves the plan's hours count (time.checkpoint_saves; the
    interval is the scenario's or the Young/Daly one, models/overheads.py). The HF-style files write it
    (TrainingArguments save_strategy "steps" and save_steps, LLaMA-Factory and Axolotl save_steps): without it the
    Trainer saves every 500 steps, which the plan did not price (a 70B checkpoint with its optimizer states is
    about 1 TB); NeMo's ModelCheckpoint takes it as every_n_train_steps; torchtune gets a note. ``arch``: the model
    as the plan priced it, which names the HF-format files' LoRA targets (lora_names.py); None takes the scenario's
    names as they are. ``steps``: the optimizer steps the plan is priced for (time.steps), written as each engine's
    run length (:func:`run_length`). ``checkpoints_kept``: the checkpoints the disk check counts beside the model
    (calibration hosts.checkpoints_kept), written as each engine's retention (:func:`retention`).
    """
    fw = scenario.training.framework
    if fw is Framework.torchtune:
        settings, notes = torchtune_settings(scenario, plan, cards_per_node)
    elif fw is Framework.nemo:
        settings, notes = nemo_settings(scenario, plan, cards_per_node)
    else:
        settings, notes = hf_settings(scenario, plan, cards_per_node, arch)
    settings.update(file_exports(scenario, plan, arch))  # the files of their own (exporters.py), shown here too
    if save_steps is not None:
        notes.append(save_note(fw, save_steps))
        if isinstance(settings.get("training_arguments"), dict):
            settings["training_arguments"]["save_strategy"] = "steps"
        set_in_hf_files(settings, {"save_steps": save_steps})
        if fw is Framework.nemo:
            settings["nemo"].setdefault("checkpoint", {})["every_n_train_steps"] = save_steps
    notes += loss_settings(settings, scenario)
    if scenario.training.reduce_dtype == "fp32":  # a property of the user's own FSDP2 loop, which no file here sets
        notes.append("reduce_dtype fp32: priced as asked (gradients held across micro-batches at 4 B), but these "
                     "files do not set FSDP2's MixedPrecisionPolicy; your training loop's policy must")
    if steps is not None:
        notes.append(run_length(settings, scenario, steps))
    if checkpoints_kept is not None:
        notes.append(retention(settings, fw, checkpoints_kept))
    if notes:
        settings["notes"] = notes
    return settings


HF_FILES = ("training_arguments", "llamafactory.yaml", AXOLOTL_FILE)  # the HF-format files (TrainingArguments names)


def set_in_hf_files(settings: dict[str, Any], values: dict[str, Any]) -> None:
    """Set ``values`` in each HF-format file the settings hold (:data:`HF_FILES`): the keys all three read alike."""
    for key in HF_FILES:
        if isinstance(settings.get(key), dict):
            settings[key].update(values)


LIGER_AXOLOTL = {"plugins": ["axolotl.integrations.liger.LigerPlugin"], "liger_fused_linear_cross_entropy": True}
TORCHTUNE_LOSS = {  # the recipes' loss component per priced loss (torchtune 0.6.1 configs; recipes reshape for
    Loss.chunked: "torchtune.modules.loss.CEWithChunkedOutputLoss",  # a plain loss on full logits)
    Loss.standard: "torch.nn.CrossEntropyLoss",
}


def loss_settings(settings: dict[str, Any], scenario: Scenario) -> list[str]:
    """Write the loss the plan's memory is priced with where the engine has a key for it; notes where it has none.

    ``training.loss`` (``auto``: calibration memory.default_loss, hf standard, torchtune chunked, nemo standard):
    - hf ``fused``, Liger's fused linear cross-entropy (the logits are never held whole): TrainingArguments
      ``use_liger_kernel`` (transformers training_args.py), LLaMA-Factory ``enable_liger_kernel`` (hparams
      model_args.py) and Axolotl's Liger plugin with ``liger_fused_linear_cross_entropy`` (integrations/liger);
      each needs the liger-kernel package, and Liger patches the model types it knows (llama, mistral, mixtral,
      qwen2/3, gemma, phi3 and more). hf ``chunked``: transformers has no chunked cross-entropy: a note.
    - torchtune: ``loss._component_`` CEWithChunkedOutputLoss (chunked, its default) or torch CrossEntropyLoss
      (standard); it has no fused linear cross-entropy in 0.6: a note.
    - nemo: Megatron's vocabulary-parallel cross-entropy whatever is asked: a note for chunked or fused.
    ``standard_16bit``, ``standard_16bit_held`` and ``standard_held`` describe other trainers' losses (reference
    runs): a note.
    """
    fw, loss = scenario.training.framework, scenario.training.loss
    if loss is Loss.auto or loss is Loss.standard and fw is not Framework.torchtune:
        return []
    if fw is Framework.hf and loss is Loss.fused:
        for key, values in (("training_arguments", {"use_liger_kernel": True}),
                            ("llamafactory.yaml", {"enable_liger_kernel": True}), (AXOLOTL_FILE, LIGER_AXOLOTL)):
            if isinstance(settings.get(key), dict):
                settings[key].update(values)
        return ["loss fused: Liger's fused linear cross-entropy (use_liger_kernel, enable_liger_kernel, Axolotl's "
                "LigerPlugin) needs `pip install liger-kernel` and a model type Liger patches (llama, mistral, "
                "mixtral, qwen2/3, gemma, phi3 and more); without it the full logits return"]  # fmt: skip
    if fw is Framework.torchtune and loss in TORCHTUNE_LOSS:
        settings["torchtune"]["loss"] = {"_component_": TORCHTUNE_LOSS[loss]}
        return []
    runs = {Framework.hf: "transformers' standard cross-entropy (fp32 logits)",
            Framework.torchtune: "the recipe's chunked cross-entropy (CEWithChunkedOutputLoss)",
            Framework.nemo: "Megatron's vocabulary-parallel cross-entropy"}[fw]
    return [f"loss {loss.value}: priced as asked, but these files cannot ask {fw.value} for it and run {runs}; the "
            "memory differs from the plan's"]  # fmt: skip


def run_length(settings: dict[str, Any], scenario: Scenario, steps: int) -> str:
    """Write the plan's optimizer steps as each engine's run length; return the note that says so.

    Without it each engine trains its own default length, not the steps the plan is priced for: TrainingArguments
    and LLaMA-Factory num_train_epochs 3, Axolotl num_epochs 1, torchtune's configs epochs 1, and NeMo 2 needs
    trainer.max_steps. HF, LLaMA-Factory and Axolotl take ``max_steps`` (it overrides the epochs: transformers
    training_args.py max_steps, axolotl utils/schemas/config.py max_steps); NeMo the Lightning trainer's
    ``max_steps``; torchtune counts epochs, so ``epochs`` = ceil(data.epochs) and ``max_steps_per_epoch`` =
    ceil(steps / epochs), optimizer steps (torchtune 0.6.1 recipes/*_distributed.py stop an epoch when
    (idx + 1) // gradient_accumulation_steps reaches it).
    """
    set_in_hf_files(settings, {"max_steps": steps})
    how = "max_steps in the files"
    if isinstance(settings.get("torchtune"), dict):
        epochs = math.ceil(scenario.data.epochs)
        settings["torchtune"]["epochs"] = epochs
        settings["torchtune"]["max_steps_per_epoch"] = math.ceil(steps / epochs)
        how = f"torchtune epochs {epochs} x max_steps_per_epoch {math.ceil(steps / epochs)}"
    if isinstance(settings.get("nemo"), dict):
        settings["nemo"]["trainer"] = {"max_steps": steps}
        how = "nemo trainer.max_steps"
    basis = ("ceil(tokens / (seq_len x global batch))" if scenario.data.packing or scenario.data.samples is None
             else "ceil(samples x epochs / global batch), one sample per row")  # DataSpec.tokens_processed
    return (f"run length: {steps} optimizer steps ({how}), the plan's {basis}, so the run lasts the hours it is "
            "priced for; the engines' defaults train for a number of epochs instead")


def retention(settings: dict[str, Any], framework: Framework, kept: int) -> str:
    """Write how many checkpoints the run keeps (the disk check's ``kept``); return the note that says so.

    HF, LLaMA-Factory and Axolotl: ``save_total_limit`` (the Trainer deletes the oldest beyond it; transformers
    training_args.py); NeMo 2: ModelCheckpoint ``save_top_k`` (NeMo's default_log keeps the top 2 by
    reduced_train_loss, and save_last one more); torchtune 0.6.1 keeps every epoch's checkpoint and has no key for it.
    """
    set_in_hf_files(settings, {"save_total_limit": kept})
    how = "save_total_limit in the files"
    if framework is Framework.nemo:
        settings["nemo"].setdefault("checkpoint", {})["save_top_k"] = kept
        how = ("NeMo ModelCheckpoint save_top_k, the lowest monitored loss; its save_last keeps the newest too: "
               "leave room for one more")
    elif framework is Framework.torchtune:
        how = "torchtune 0.6 keeps every epoch's checkpoint and has no limit: delete older ones yourself"
    return f"checkpoints kept: the disk check counts the model and {kept} checkpoints ({how})"


def save_note(framework: Framework, save_steps: int) -> str:
    """The checkpoint interval the plan's hours assume, as each engine is told it."""
    how = {Framework.hf: "save_steps in the files", Framework.torchtune: "torchtune 0.6 saves at each epoch end: "
           "set a step-level save if your version has one", Framework.nemo: "nemo checkpoint.every_n_train_steps, "
           "ModelCheckpoint's"}
    return f"checkpoints: the plan's hours count a save every {save_steps} optimizer steps ({how[framework]})"

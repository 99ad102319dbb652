"""Run inside LLaMA-Factory's own environment: parse each exported YAML with LLaMA-Factory's ``get_train_args``.

Usage: python lf_check.py CASES.json RESULTS.json. CASES.json maps a case name to {"config", "ds_config", "dp",
"command", "environment"}; RESULTS.json maps it to "ok" or the error text. This CPU process stands for the plan's
GPU ranks: the world size is the plan's data-parallel size and bf16 is available, as on the GPUs the solver proposes
bf16 for.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path


def _check(case: dict, workdir: Path) -> str:
    import transformers.training_args as training_args
    from llamafactory.hparams import get_train_args
    from transformers import TrainingArguments

    config = dict(case["config"], output_dir=str(workdir / "out"), report_to="none")
    if "deepspeed" in config:
        path = workdir / "ds_config.json"
        path.write_text(json.dumps(case["ds_config"]))
        config["deepspeed"] = str(path)
    # what llamafactory-cli does with the exported environment on the GPU node (launcher.py): torchrun when
    # FORCE_TORCHRUN is set or the node has several GPUs, and accelerate's FSDP launcher is torchrun too; torchrun
    # hands the script its rank variables (one local rank stands for them here)
    env = case["environment"]
    torchrun = env.get("FORCE_TORCHRUN") == "1" or int(env["NPROC_PER_NODE"]) > 1
    if torchrun or case["command"].startswith("accelerate launch"):
        os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
    else:
        for key in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
            os.environ.pop(key, None)
    TrainingArguments.world_size = property(lambda self: case["dp"])
    training_args.is_torch_bf16_gpu_available = lambda: True
    model_args, data_args, train_args, finetuning_args, _ = get_train_args(config)
    assert train_args.per_device_train_batch_size == config["per_device_train_batch_size"]
    assert finetuning_args.finetuning_type == config["finetuning_type"]
    assert train_args.max_steps == config["max_steps"] > 0 and train_args.save_total_limit == config["save_total_limit"]
    assert train_args.lr_scheduler_type.value == config["lr_scheduler_type"] and train_args.warmup_steps == 0
    if "use_reentrant_gc" in config:
        assert model_args.use_reentrant_gc is config["use_reentrant_gc"]
    if "accelerator_config" in config:  # TrainingArguments turns the dict into accelerate's AcceleratorConfig
        kwargs = train_args.accelerator_config.gradient_accumulation_kwargs
        assert kwargs == config["accelerator_config"]["gradient_accumulation_kwargs"], kwargs
    if "enable_liger_kernel" in config:
        assert model_args.enable_liger_kernel is config["enable_liger_kernel"]
    if config.get("quantization_bit"):
        assert model_args.quantization_bit == config["quantization_bit"]
    if "deepspeed" in config:
        hf_ds = train_args.hf_deepspeed_config
        assert hf_ds.config["train_batch_size"] == config["per_device_train_batch_size"] * config[
            "gradient_accumulation_steps"] * case["dp"]  # fmt: skip
    if case["command"].startswith("accelerate launch"):
        from accelerate.commands.launch import launch_command_parser

        argv = [{"$NODE_RANK": "0", "$MASTER_ADDR": "10.0.0.1"}.get(a, a) for a in shlex.split(case["command"])[2:]]
        args = launch_command_parser().parse_args(argv)
        assert args.module and args.training_script == "llamafactory.launcher", args
    return "ok"


if __name__ == "__main__":
    from check_runner import run  # beside this script, which runs from this folder

    run(_check)

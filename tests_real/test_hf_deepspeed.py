"""hf plans: DeepSpeedConfig with the plan's data-parallel size, HfArgumentParser(TrainingArguments) with the
HF-DeepSpeed consistency checks, PEFT LoraConfig, accelerate's launch parser and the launcher it picks.

Versions: .ci/launch-requirements.txt (DeepSpeed 0.19.8, transformers 5.24.0, accelerate 1.15.0, peft 0.21.2).
"""

from __future__ import annotations

import json
import shlex
import warnings
from types import SimpleNamespace

import pytest

from tests_real.cases import ids_for, solved
from tests_real.gpu_facts import gpu_of, torch_bf16

HF = ids_for("hf_deepspeed", "hf_fsdp")
DS = [n for n in HF if "ds_config.json" in solved(n).settings]
ENV = {"$NODE_RANK": "0", "$MASTER_ADDR": "10.0.0.1"}


def _deepspeed_config(ds: dict, dp: int, monkeypatch):
    import deepspeed.runtime.config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda: 0)  # no process group on this machine
    mpu = SimpleNamespace(get_data_parallel_world_size=lambda: dp)  # DeepSpeed then checks the batch against dp
    return ds_config.DeepSpeedConfig(json.loads(json.dumps(ds)), mpu=mpu)


def _filled_ds_config(case, tmp_path, monkeypatch) -> dict:
    """ds_config.json with its "auto" values filled as the Trainer fills them at its DeepSpeed init (the model's
    hidden size for the bucket sizes; transformers integrations/deepspeed.py trainer_config_finalize)."""
    args = _training_arguments(case, tmp_path, monkeypatch)
    hf_ds = args.hf_deepspeed_config
    model = SimpleNamespace(config=SimpleNamespace(hidden_size=case.model.hidden))
    hf_ds.trainer_config_finalize(args, model, num_training_steps=10)
    return hf_ds.config


@pytest.mark.parametrize("name", DS)
def test_deepspeed_accepts_the_config_with_the_plans_data_parallel_size(name, tmp_path, monkeypatch):
    case = solved(name)
    filled = _filled_ds_config(case, tmp_path, monkeypatch)
    cfg = _deepspeed_config(filled, case.plan.dp, monkeypatch)
    # the bucket sizes the memory model prices: HF's auto sizes from the hidden size, not DeepSpeed's 5e8 elements
    h = case.model.hidden
    assert cfg.zero_config.reduce_bucket_size == h * h
    if case.plan.zero_stage == 3:
        assert cfg.zero_config.prefetch_bucket_size == int(0.9 * h * h)
        assert cfg.zero_config.param_persistence_threshold == 10 * h
    assert cfg.zero_optimization_stage == case.plan.zero_stage
    assert cfg.train_batch_size == case.scenario.global_batch
    offload = cfg.zero_config.offload_optimizer
    assert (offload is not None and str(offload.device).endswith("cpu")) == (case.plan.offload.value != "none")


def _training_arguments(case, tmp_path, monkeypatch):
    from transformers import HfArgumentParser, TrainingArguments, training_args
    from trl import SFTConfig

    # TRL's SFTConfig (a TrainingArguments subclass) takes training_arguments plus sft_config (packing, max_length)
    args = dict(case.settings["training_arguments"], **case.settings["sft_config"], output_dir=str(tmp_path / "out"),
                report_to="none")  # fmt: skip
    if "deepspeed" in args:
        path = tmp_path / "ds_config.json"
        path.write_text(json.dumps(case.settings["ds_config.json"]))
        args["deepspeed"] = str(path)
    # the Trainer counts every rank as data parallel: one process here stands for the plan's dp ranks
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: case.plan.dp))
    # this CPU machine stands for the plan's GPU: TrainingArguments' bf16 check gets torch's answer for that card
    bf16 = torch_bf16(gpu_of(case.plan))
    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: bf16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parser = HfArgumentParser(SFTConfig)
        (parsed,) = parser.parse_dict(args, allow_extra_keys=False)
    renamed = [str(w.message) for w in caught if "deprecated" in str(w.message) and "checkpointing" in str(w.message)]
    assert renamed == [], renamed  # transformers 5.23+ names, no deprecated aliases
    return parsed


@pytest.mark.parametrize("name", HF)
def test_training_arguments_parse_and_agree_with_deepspeed(name, tmp_path, monkeypatch):
    """HfArgumentParser takes every key; with DeepSpeed the Trainer's consistency checks (batch sizes, precision,
    gradient clipping, optimizer) find no mismatch (HfTrainerDeepSpeedConfig trainer_config_process/finalize)."""
    case = solved(name)
    args = _training_arguments(case, tmp_path, monkeypatch)
    assert args.activation_checkpointing == case.settings["training_arguments"]["activation_checkpointing"]
    # rows of seq_len tokens, full when the plan counts packed rows (TRL "wrapped" fills every row)
    assert args.max_length == case.scenario.seq_len and args.packing == case.scenario.data.packing
    assert not args.packing or args.packing_strategy == "wrapped"
    # the plan's run: its optimizer steps, the checkpoints the disk check counts, transformers' linear schedule
    ta = case.settings["training_arguments"]
    assert args.max_steps == ta["max_steps"] > 0 and args.save_total_limit == ta["save_total_limit"]
    assert args.lr_scheduler_type.value == "linear" and args.warmup_steps == 0
    if "accelerator_config" in ta:
        assert args.accelerator_config.gradient_accumulation_kwargs == {"sync_each_batch": True}
    if "deepspeed" in case.settings["training_arguments"]:
        hf_ds = args.hf_deepspeed_config
        model = SimpleNamespace(config=SimpleNamespace(hidden_size=case.model.hidden))
        hf_ds.trainer_config_finalize(args, model, num_training_steps=10)
        assert hf_ds.config["train_batch_size"] == case.scenario.global_batch


@pytest.mark.parametrize("name", [n for n in HF if "lora_config" in solved(n).settings])
def test_peft_accepts_the_lora_config(name):
    from peft import LoraConfig

    cfg = LoraConfig(**solved(name).settings["lora_config"])
    assert cfg.r == solved(name).scenario.lora_spec.rank
    targets = [str(t) for t in solved(name).scenario.lora_spec.targets]
    if "lm_head" in targets:  # PEFT's all-linear leaves the output layer out: it must be named
        assert "lm_head" in cfg.target_modules and "all-linear" not in cfg.target_modules


@pytest.mark.parametrize("name", [n for n in HF if "quantization_config" in solved(n).settings["from_pretrained"]])
def test_transformers_accepts_the_quantization_config(name):
    from transformers import BitsAndBytesConfig

    quant = BitsAndBytesConfig(**solved(name).settings["from_pretrained"]["quantization_config"])
    assert quant.load_in_4bit or quant.load_in_8bit


def _launch_args(command: str):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    argv = shlex.split(command)
    assert argv[:2] == ["accelerate", "launch"], command
    argv = [ENV.get(a, a) for a in argv[2:]]
    args = launch_command_parser().parse_args(argv)
    args, defaults, _ = _validate_launch_command(args)
    assert defaults is None  # no accelerate config file on this machine: the command line alone decides
    args.deepspeed_fields_from_accelerate_config = ""  # as launch_command sets it before the DeepSpeed launcher
    return args


@pytest.mark.parametrize("name", HF)
def test_accelerate_picks_a_launcher_that_sets_the_rank_variables(name, tmp_path, monkeypatch):
    """DeepSpeed plans, one GPU included, take accelerate's DeepSpeed launcher (torchrun underneath, which sets RANK,
    LOCAL_RANK and WORLD_SIZE); FSDP and multi-GPU plans the multi-GPU launcher; across nodes torchrun, not pdsh."""
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    case = solved(name)
    monkeypatch.chdir(tmp_path)
    if "ds_config.json" in case.settings:
        (tmp_path / "ds_config.json").write_text(json.dumps(case.settings["ds_config.json"]))
    args = _launch_args(case.settings["command"])
    assert args.num_processes == case.plan.cards and args.num_machines == case.plan.nodes
    if "ds_config.json" in case.settings:
        assert args.use_deepspeed, "DeepSpeed needs accelerate's DeepSpeed launcher"
        cmd, env = prepare_deepspeed_cmd_env(args)
        assert cmd is None, f"multi-node DeepSpeed through {cmd[0] if cmd else ''}: needs torchrun"
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_config.json"
    elif "accelerate_fsdp" in case.settings:
        assert args.use_fsdp
        env = prepare_multi_gpu_env(args)
        assert env["ACCELERATE_USE_FSDP"] == "true"
        fsdp = case.settings["accelerate_fsdp"]
        assert env["FSDP_SHARDING_STRATEGY"] == fsdp["fsdp_sharding_strategy"]
        assert env["FSDP_OFFLOAD_PARAMS"] == str(fsdp["fsdp_offload_params"]).lower()
    else:
        assert args.multi_gpu == (case.plan.cards > 1)


@pytest.mark.parametrize("name", [n for n in HF if "accelerate_fsdp" in solved(n).settings])
def test_accelerate_builds_the_fsdp_plugin_from_the_flags(name, monkeypatch):
    """The environment the launcher hands the script becomes a FullyShardedDataParallelPlugin without error."""
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils import dataclasses as accelerate_dataclasses
    from accelerate.utils.launch import prepare_multi_gpu_env

    case = solved(name)
    env = prepare_multi_gpu_env(_launch_args(case.settings["command"]))
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    # sync_module_states asks for the current GPU, which this CPU machine stands in for
    monkeypatch.setattr(accelerate_dataclasses, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 1
    assert plugin.sharding_strategy.name == case.settings["accelerate_fsdp"]["fsdp_sharding_strategy"]

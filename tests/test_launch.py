"""The plan becomes launchable settings: DeepSpeed JSON, HF TrainingArguments, FSDP, torchtune and NeMo keys."""

from __future__ import annotations

import json

import pytest
import yaml

from optimizer.inputs.catalog import load_scenario, resolve_model
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch import deepspeed_config, from_pretrained, fsdp_plugin, hf_arguments, launch_settings
from optimizer.solve.planner import solve_scenario
from optimizer.solve.space import enumerate_all

from .conftest import REPO, scenario_doc, seventy_b


def _plan(**changes) -> Plan:
    base = dict(gpu="A100-80G", offer="x", cards=16, nodes=2, tp=1, pp=1, dp=16, zero_stage=3, offload="optimizer",
                micro_batch=2, grad_accum=4, precision="bf16", optimizer="adamw", checkpointing="full", term="hour",
                billed_units={"hour": 10})  # fmt: skip
    return Plan(**{**base, **changes})


def test_deepspeed_config_offloads_the_optimizer_but_not_the_parameters():
    ds = deepspeed_config(_plan())
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in ds["zero_optimization"]


def test_deepspeed_config_offloads_parameters_for_offload_all_at_stage_3():
    assert "offload_param" in deepspeed_config(_plan(offload="all"))["zero_optimization"]


def test_offloaded_adamw_is_declared_so_deepspeed_steps_it_on_the_cpu():
    """ZeRO-Offload raises for a client optimizer (zero_force_ds_cpu_optimizer); declaring AdamW in the config makes
    DeepSpeed build DeepSpeedCPUAdam, and "auto" lets the HF Trainer fill in its own hyper-parameters."""
    ds = deepspeed_config(_plan())
    assert ds["optimizer"] == {"type": "AdamW", "params": {k: "auto" for k in ("lr", "betas", "eps", "weight_decay")}}
    assert "optimizer" not in deepspeed_config(_plan(offload="none"))


def test_solver_offloads_only_optimizers_that_step_on_the_cpu(write_scenario, catalog):
    """bitsandbytes' 8-bit optimizers need CUDA tensors and DeepSpeed's offload only runs its own CPU AdamW:
    no offloaded candidate for them; FSDP offload keeps torch's SGD; a pinned offload with them is refused."""

    def offloads(**training):
        path = write_scenario(f"{'-'.join(map(str, training.values()))}.yaml",
                              training={"framework": "hf", "attention": "flash", **training})  # fmt: skip
        sc = load_scenario(path)
        _, _, _, ev = enumerate_all(sc, catalog, resolve_model(sc, catalog, path), str(path))
        return set(ev.cfg.offload.tolist()) - {0}

    assert offloads(sharding="deepspeed", optimizer="adamw")
    assert not offloads(sharding="deepspeed", optimizer="paged_adamw_8bit")
    assert not offloads(sharding="deepspeed", optimizer="sgd")
    assert offloads(sharding="fsdp", optimizer="sgd")
    assert not offloads(sharding="fsdp", optimizer="adamw_8bit")
    training = {"framework": "hf", "sharding": "deepspeed", "optimizer": "adamw_8bit"}
    pinned = write_scenario("pinned.yaml", plan={"offload": "optimizer"}, training=training)
    sc = load_scenario(pinned)
    with pytest.raises(InputError, match="cannot step adamw_8bit on the CPU"):
        enumerate_all(sc, catalog, resolve_model(sc, catalog, pinned), str(pinned))


def test_deepspeed_batch_sizes_multiply_to_the_global_batch():
    ds = deepspeed_config(_plan())
    assert (
        ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 16 == ds["train_batch_size"] == 128
    )


def test_hf_arguments_turn_on_activation_checkpointing_and_bf16():
    args = hf_arguments(Scenario(**scenario_doc(method="full", lora=None)), _plan())
    assert args["activation_checkpointing"] is True and args["bf16"] is True and args["fp16"] is False
    assert args["deepspeed"] == "ds_config.json"


def test_fsdp_stage_3_is_full_shard_with_offload():
    fsdp = fsdp_plugin(_scenario("full", sharding="fsdp"), _plan())
    assert fsdp["fsdp_sharding_strategy"] == "FULL_SHARD" and fsdp["fsdp_offload_params"] is True


def test_multi_node_launch_names_the_rendezvous():
    sc = Scenario(**scenario_doc(method="full", lora=None))
    command = launch_settings(sc, _plan(), cards_per_node=8)["command"]
    assert "--num_processes 16 --num_machines 2" in command and "--main_process_ip" in command


def test_hf_plans_use_only_checkpointing_levels_hf_offers():
    # HF transformers recomputes whole layers only (catalogs/calibration.yaml frameworks.checkpointing)
    result = solve_scenario(seventy_b(), top_k=3)
    assert all(e.plan.checkpointing.value in ("none", "full") for e in result.top + result.alternatives)


def test_solve_writes_launch_files(run_cli, tmp_path):
    out = tmp_path / "launch"
    done = run_cli("solve", seventy_b(), "--launch-dir", out)
    assert done.exit_code == 0, done.stderr
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] in (1, 2, 3)
    assert "training_arguments" in (out / "launch.yaml").read_text()


# ---------------------------------------------------------------------------------------------------------------
# Audit against the projects' documentation (sources in optimizer/launch.py)


def _scenario(method: str = "full", **training) -> Scenario:
    """A scenario with the given method and training settings (hf, DeepSpeed unless told otherwise)."""
    lora = None if method == "full" else {"rank": 16, "alpha": 32, "targets": ["all-linear"]}
    return Scenario(**scenario_doc(method=method, lora=lora, training={"framework": "hf", **training}))


def test_declared_offload_optimizer_is_not_contradicted_by_optim():
    """With "optimizer" in ds_config.json the HF Trainer ignores optim (DummyOptim, transformers
    integrations/deepspeed.py): printing adamw_torch_fused beside DeepSpeed's CPU AdamW would contradict it."""
    sc = _scenario("full")
    offloaded = hf_arguments(sc, _plan())
    assert "optimizer" in deepspeed_config(_plan()) and "optim" not in offloaded
    assert hf_arguments(sc, _plan(offload="none"))["optim"] == "adamw_torch_fused"
    assert hf_arguments(_scenario("full", sharding="fsdp"), _plan())["optim"] == "adamw_torch_fused"  # no ds_config


def test_fsdp_full_fine_tuning_recomputes_once():
    """The Trainer raises when fsdp activation_checkpointing and its own activation_checkpointing are both true."""
    sc = _scenario("full", sharding="fsdp")
    settings = launch_settings(sc, _plan(), cards_per_node=8)
    assert settings["accelerate_fsdp"]["fsdp_activation_checkpointing"] is True
    assert settings["training_arguments"]["activation_checkpointing"] is False
    for method in ("lora", "qlora"):  # PEFT's FSDP recipe recomputes through the Trainer instead
        settings = launch_settings(_scenario(method, sharding="fsdp"), _plan(), cards_per_node=8)
        assert settings["accelerate_fsdp"]["fsdp_activation_checkpointing"] is False
        assert settings["training_arguments"]["activation_checkpointing"] is True


def test_qlora_under_fsdp_follows_the_peft_recipe():
    """peft docs accelerate/fsdp.md: fsdp_cpu_ram_efficient_loading true, fsdp_use_orig_params false, the 4-bit
    weights stored in the model dtype (bnb_4bit_quant_storage = dtype), reentrant checkpointing."""
    sc = _scenario("qlora", sharding="fsdp")
    settings = launch_settings(sc, _plan(), cards_per_node=8)
    fsdp = settings["accelerate_fsdp"]
    assert fsdp["fsdp_use_orig_params"] is False and fsdp["fsdp_cpu_ram_efficient_loading"] is True
    assert fsdp["fsdp_sync_module_states"] is True  # accelerate refuses ram-efficient loading without it
    assert fsdp["fsdp_version"] == 1 and fsdp["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    loading = settings["from_pretrained"]
    quant = loading["quantization_config"]
    assert quant["load_in_4bit"] and quant["bnb_4bit_quant_type"] == "nf4" and quant["bnb_4bit_use_double_quant"]
    assert quant["bnb_4bit_quant_storage"] == loading["dtype"] == quant["bnb_4bit_compute_dtype"] == "bfloat16"
    assert settings["training_arguments"]["activation_checkpointing_kwargs"] == {"use_reentrant": True}
    fp16 = from_pretrained(sc, _plan(precision="fp16"))  # fp16 AMP: float32 storage (peft fsdp.md)
    assert fp16["dtype"] == fp16["quantization_config"]["bnb_4bit_quant_storage"] == "float32"
    lora = launch_settings(_scenario("lora", sharding="fsdp"), _plan(), cards_per_node=8)
    assert lora["accelerate_fsdp"]["fsdp_use_orig_params"] is False
    # a 16-bit LoRA base under FSDP loads in fp32, as hf_fsdp prices it (frozen_base_bytes 4, PEFT's sft example)
    assert lora["from_pretrained"] == {"attn_implementation": "flash_attention_2", "dtype": "float32"}
    assert lora["training_arguments"]["activation_checkpointing_kwargs"] == {"use_reentrant": False}
    assert fsdp_plugin(_scenario("full", sharding="fsdp"), _plan())["fsdp_use_orig_params"] is True


def test_qlora_under_zero3_stores_weights_in_the_model_dtype():
    """peft docs accelerate/deepspeed.md: ZeRO-3 + QLoRA needs bnb_4bit_quant_storage = dtype and reentrant
    checkpointing; below ZeRO-3 (and for QLoRA under DDP) neither applies (run_peft_multigpu.sh)."""
    sc = _scenario("qlora")
    z3 = launch_settings(sc, _plan(offload="none"), cards_per_node=8)
    assert z3["from_pretrained"]["quantization_config"]["bnb_4bit_quant_storage"] == "bfloat16"
    assert z3["from_pretrained"]["dtype"] == "bfloat16"
    assert z3["training_arguments"]["activation_checkpointing_kwargs"] == {"use_reentrant": True}
    assert z3["ds_config.json"]["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    z2 = launch_settings(sc, _plan(zero_stage=2, offload="none"), cards_per_node=8)
    assert "bnb_4bit_quant_storage" not in z2["from_pretrained"]["quantization_config"]
    assert "dtype" not in z2["from_pretrained"]
    assert z2["training_arguments"]["activation_checkpointing_kwargs"] == {"use_reentrant": False}
    assert "stage3_gather_16bit_weights_on_model_save" not in z2["ds_config.json"]["zero_optimization"]
    eight = from_pretrained(_scenario("lora", base_bits=8), _plan())
    assert eight == {"attn_implementation": "flash_attention_2", "quantization_config": {"load_in_8bit": True}}
    assert from_pretrained(_scenario("full", attention="sdpa"), _plan()) == {"attn_implementation": "sdpa"}


def test_a_16_bit_model_loads_in_the_dtype_its_memory_is_priced_in():
    """Without a dtype from_pretrained loads the checkpoint's own (transformers dtype="auto"): a bf16 model trained
    pure bf16 where the hf profile prices fp32 master weights (weight_bytes 6), and a float16 one under fp16 stopped
    at the GradScaler. Full fine-tuning without DeepSpeed and any FSDP plan load fp32; a plain LoRA base the
    16-bit compute dtype (frozen_base_bytes 2); DeepSpeed casts the module itself."""
    ddp = dict(zero_stage=0, offload="none", cards=4, nodes=1, dp=4)
    assert from_pretrained(_scenario("full"), _plan(**ddp))["dtype"] == "float32"
    assert from_pretrained(_scenario("full"), _plan(precision="fp16", **ddp))["dtype"] == "float32"
    assert from_pretrained(_scenario("full", sharding="fsdp"), _plan(offload="none"))["dtype"] == "float32"
    assert from_pretrained(_scenario("lora"), _plan(**ddp))["dtype"] == "bfloat16"
    assert from_pretrained(_scenario("lora"), _plan(precision="fp16", **ddp))["dtype"] == "float16"
    assert "dtype" not in from_pretrained(_scenario("full"), _plan())  # DeepSpeed ZeRO-3
    assert "dtype" not in from_pretrained(_scenario("lora", base_bits=8), _plan(**ddp))


def test_the_load_dtype_follows_the_calibration_profiles():
    """Each engine profile's bytes per parameter name the dtype the launch loads in: 4 or 6 (fp32, with or without
    an autocast copy) is float32, 2 the 16-bit compute dtype (hf_args.load_dtype)."""
    from optimizer.launch.hf_args import load_dtype

    profiles = yaml.safe_load((REPO / "catalogs" / "calibration.yaml").read_text())["memory"]["profiles"]
    ddp = dict(zero_stage=0, offload="none", cards=4, nodes=1, dp=4)
    cases = {("hf", "full"): ("weight_bytes", _scenario("full"), _plan(**ddp)),
             ("hf", "lora"): ("frozen_base_bytes", _scenario("lora"), _plan(**ddp)),
             ("hf_fsdp", "full"): ("weight_bytes", _scenario("full", sharding="fsdp"), _plan(offload="none")),
             ("hf_fsdp", "lora"): ("frozen_base_bytes", _scenario("lora", sharding="fsdp"), _plan(offload="none"))}
    for (profile, method), (key, sc, plan) in cases.items():
        fp32 = profiles[profile][key] >= 4
        assert (load_dtype(sc, plan) == "float32") is fp32, (profile, method)


def test_sgd_runs_with_the_momentum_its_memory_is_priced_with():
    """The memory model prices SGD's momentum buffer (half of AdamW's states); torch's SGD and the Trainer's
    optim "sgd" default to momentum 0, so every file sets it (TrainingArguments optim_args; torchtune's block)."""
    ddp = dict(zero_stage=0, offload="none", cards=4, nodes=1, dp=4, optimizer="sgd")
    settings = launch_settings(_scenario("full"), _plan(**ddp), cards_per_node=8)
    assert settings["training_arguments"]["optim"] == "sgd"
    assert settings["training_arguments"]["optim_args"] == "momentum=0.9"
    from optimizer.launch.axolotl_cfg import axolotl_config
    from optimizer.launch.llamafactory_cfg import llamafactory_config

    lf, ax = llamafactory_config(_scenario("full"), _plan(**ddp)), axolotl_config(_scenario("full"), _plan(**ddp))
    assert lf["optim_args"] == ax["optim_args"] == "momentum=0.9"
    adamw = launch_settings(_scenario("full"), _plan(**{**ddp, "optimizer": "adamw"}), cards_per_node=8)
    assert "optim_args" not in adamw["training_arguments"]
    tt = launch_settings(_scenario("full", framework="torchtune", sharding="fsdp"), _plan(optimizer="sgd",
                         offload="none"), cards_per_node=8)  # fmt: skip
    # fused off: the config's fused: True would reach FSDP2's DTensors, which have no fused SGD kernel
    assert tt["torchtune"]["optimizer"] == {"_component_": "torch.optim.SGD", "momentum": 0.9, "fused": False}


def test_fsdp_command_turns_fsdp_on():
    """Without --use_fsdp (or a config file) accelerate launch starts plain data parallel; every fsdp_config key is
    also a launch flag, and mixed precision is a top-level accelerate setting (no | fp16 | bf16 | fp8)."""
    settings = launch_settings(_scenario("qlora", sharding="fsdp"), _plan(), cards_per_node=8)
    command, fsdp = settings["command"], settings["accelerate_fsdp"]
    assert command.startswith("accelerate launch --use_fsdp ") and "--mixed_precision bf16" in command
    for key, value in fsdp.items():
        assert f"--{key} {str(value).lower() if isinstance(value, bool) else value} " in command
    assert "mixed_precision" not in fsdp
    fp32 = launch_settings(_scenario("full", sharding="fsdp"), _plan(precision="fp32"), cards_per_node=8)
    assert "--mixed_precision no " in fp32["command"]
    ds = launch_settings(_scenario("full"), _plan(), cards_per_node=8)
    assert "--use_fsdp" not in ds["command"] and ds["training_arguments"]["deepspeed"] == "ds_config.json"


def test_deepspeed_precision_blocks():
    """fp16: dynamic loss scale (loss_scale 0); fp32: fp16 disabled explicitly (the Trainer reads a config with
    neither block as fp16); parameter offload only at stage 3."""
    assert deepspeed_config(_plan(precision="fp16"))["fp16"] == {"enabled": True, "loss_scale": 0}
    fp32 = deepspeed_config(_plan(precision="fp32"))
    assert fp32["fp16"] == {"enabled": False} and "bf16" not in fp32
    assert "offload_param" not in deepspeed_config(_plan(zero_stage=2, offload="all"))["zero_optimization"]


def test_zero3_plans_say_to_build_training_arguments_before_the_model():
    notes = launch_settings(_scenario("full"), _plan(), cards_per_node=8)["notes"]
    assert any("before from_pretrained" in n for n in notes)
    zero2 = launch_settings(_scenario("full"), _plan(zero_stage=2, dp=16), cards_per_node=8)["notes"]
    assert not any("before from_pretrained" in n for n in zero2)


def test_nemo_keys_are_megatron_core_names():
    """NeMo 2 MegatronMixedPrecision precision is "16-mixed" | "bf16-mixed" | "32"; Megatron-Core raises for full
    recomputation without recompute_method and recompute_num_layers."""
    sc = _scenario("full", framework="nemo")

    def nemo(**changes):
        return launch_settings(sc, _plan(**changes), cards_per_node=8)["nemo"]

    assert nemo()["precision"] == "bf16-mixed" and nemo(precision="fp16")["precision"] == "16-mixed"
    assert nemo(precision="fp32")["precision"] == "32"
    fp8 = nemo(precision="fp8")
    assert fp8["precision"] == "bf16-mixed" and fp8["transformer_config"]["fp8"] == "hybrid"
    full = nemo()["transformer_config"]
    assert full["recompute_granularity"] == "full" and full["recompute_method"] == "uniform"
    assert full["recompute_num_layers"] == 1 and "activations_checkpoint_granularity" not in full
    selective = nemo(checkpointing="selective")["transformer_config"]
    assert selective["recompute_granularity"] == "selective" and "recompute_method" not in selective


def test_nemo_zero_stages_and_offload_write_the_megatron_keys():
    """ZeRO-1 is Megatron's distributed optimizer, ZeRO-2/3 Megatron FSDP (optim_grads, optim_grads_params);
    optimizer offload is optimizer_cpu_offload with the whole fraction (megatron-core 0.16 configs)."""
    sc = _scenario("full", framework="nemo")

    def nemo(**changes):
        return launch_settings(sc, _plan(**changes), cards_per_node=8)["nemo"]

    z1 = nemo(zero_stage=1)
    assert z1["ddp"] == {"use_distributed_optimizer": True} and z1["optimizer"]["optimizer_cpu_offload"] is True
    assert z1["optimizer"]["optimizer_offload_fraction"] == 1.0 and z1["optimizer"]["use_distributed_optimizer"]
    z3 = nemo(zero_stage=3, offload="none")
    assert z3["ddp"]["use_megatron_fsdp"] and z3["ddp"]["data_parallel_sharding_strategy"] == "optim_grads_params"
    assert "optimizer_cpu_offload" not in z3["optimizer"]
    assert nemo(zero_stage=2, offload="none")["ddp"]["data_parallel_sharding_strategy"] == "optim_grads"
    assert nemo(zero_stage=0, offload="none")["ddp"] == {"use_distributed_optimizer": False}


def test_nemo_launches_the_interleaved_schedule_the_time_model_priced():
    """virtual_pipeline_model_parallel_size is the plan's virtual_pipeline (NeMo 2 MegatronStrategy), absent for
    plain 1F1B or no pipeline."""
    sc = _scenario("full", framework="nemo")
    interleaved = _plan(pp=2, dp=8, virtual_pipeline=8, zero_stage=1)
    strategy = launch_settings(sc, interleaved, cards_per_node=8)["nemo"]["strategy"]
    assert strategy == {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
                        "pipeline_dtype": "bfloat16", "virtual_pipeline_model_parallel_size": 8}  # fmt: skip
    plain = launch_settings(sc, _plan(pp=2, dp=8, zero_stage=1), cards_per_node=8)["nemo"]["strategy"]
    assert "virtual_pipeline_model_parallel_size" not in plain and plain["pipeline_dtype"] == "bfloat16"
    # megatron-core needs pipeline_dtype for pp > 1 (ModelParallelConfig.__post_init__); not without a pipeline
    assert "pipeline_dtype" not in launch_settings(sc, _plan(), cards_per_node=8)["nemo"]["strategy"]
    fp16 = launch_settings(sc, _plan(pp=2, dp=8, precision="fp16"), cards_per_node=8)["nemo"]["strategy"]
    assert fp16["pipeline_dtype"] == "float16"


def test_a_solved_nemo_pipeline_plan_reports_and_launches_its_chunks(write_scenario):
    """End to end: a pinned pp 2 under nemo on Llama-3.1-8B (32 layers, 16 per stage) is priced and launched with
    8 chunks per stage."""
    doc = scenario_doc(method="full", lora=None, training={"framework": "nemo", "optimizer": "adamw"},
                       plan={"gpu": "H100-SXM", "cards": 8, "tp": 2, "pp": 2})  # fmt: skip
    est = solve_scenario(write_scenario(doc=doc)).best
    assert est.plan is not None and est.plan.pp == 2 and est.plan.virtual_pipeline == 8
    nemo = launch_settings(Scenario(**doc), est.plan, cards_per_node=8)["nemo"]
    assert nemo["strategy"]["virtual_pipeline_model_parallel_size"] == 8


def test_torchtune_keys_carry_the_scenario_and_the_plan():
    """Recipe keys of torchtune's distributed recipes: fsdp_reshard_after_forward False is SHARD_GRAD_OP, and the
    scenario's compile / activation offloading / optimizer-in-backward settings the plan was priced with."""
    training = {"framework": "torchtune", "sharding": "fsdp", "compile": True, "activation_offload": True,
                "optimizer_in_backward": True}  # fmt: skip
    settings = launch_settings(_scenario("full", **training), _plan(zero_stage=2, grad_accum=1), cards_per_node=8)
    tt = settings["torchtune"]
    assert tt["fsdp_reshard_after_forward"] is False and tt["compile"] is True
    assert tt["enable_activation_offloading"] is True and tt["optimizer_in_bwd"] is True
    assert tt["clip_grad_norm"] is None  # the recipe raises for optimizer_in_bwd with gradient clipping
    assert " full_finetune_distributed --config " in settings["command"]
    assert "--rdzv_endpoint $MASTER_ADDR:29500" in settings["command"]  # two nodes need a rendezvous
    lora = launch_settings(_scenario("lora", framework="torchtune"), _plan(nodes=1), cards_per_node=16)
    assert "optimizer_in_bwd" not in lora["torchtune"] and " lora_finetune_distributed " in lora["command"]
    assert "--rdzv" not in lora["command"]


def test_torchtune_adamw_runs_fused_as_the_hf_launch_does():
    """torch AdamW's default multi-tensor path keeps a copy of the second moment per step and moves about three times
    the optimizer traffic the model prices; the fused kernel is what both launch families ask for."""
    tt = launch_settings(_scenario("full", framework="torchtune", sharding="fsdp"), _plan(), cards_per_node=8)
    assert tt["torchtune"]["optimizer"] == {"_component_": "torch.optim.AdamW", "fused": True}
    hf = launch_settings(_scenario("full", sharding="fsdp"), _plan(), cards_per_node=8)
    assert hf["training_arguments"]["optim"] == "adamw_torch_fused"
    sgd = launch_settings(_scenario("full", framework="torchtune", sharding="fsdp"), _plan(optimizer="sgd"),
                          cards_per_node=8)  # fmt: skip
    assert sgd["torchtune"]["optimizer"] == {"_component_": "torch.optim.SGD", "momentum": 0.9, "fused": False}


def test_torchtune_notes_what_the_recipe_cannot_run():
    sc = _scenario("full", framework="torchtune", sharding="fsdp")

    def notes(**changes):
        return " ".join(launch_settings(sc, _plan(**changes), cards_per_node=8).get("notes", []))

    # fp16 and fp8 never get here: scenarios pinning them are refused (calibration frameworks.precisions)
    assert "selective" in notes(checkpointing="selective")
    assert "one data-parallel rank" in notes(cards=1, nodes=1, dp=1, offload="all")
    assert notes() == ""


# ---------------------------------------------------------------------------------------------------------------
# Launch failures found by the real-library tier (tests_real/), pinned here without the libraries


def test_one_gpu_deepspeed_plans_take_the_deepspeed_launcher():
    """Without --use_deepspeed one process runs through accelerate's simple launcher, which sets no rank variables,
    and DeepSpeed falls back to MPI discovery (accelerate commands/launch.py launch_command)."""
    one = launch_settings(_scenario("full"), _plan(cards=1, nodes=1, dp=1, zero_stage=2), cards_per_node=8)
    assert one["command"].startswith("accelerate launch --use_deepspeed --deepspeed_config_file ds_config.json ")
    assert "--num_processes 1 " in one["command"]
    two_nodes = launch_settings(_scenario("full"), _plan(), cards_per_node=8)["command"]
    assert "--deepspeed_multinode_launcher standard" in two_nodes  # torchrun on each node, not pdsh over ssh


def test_sgd_under_zero_offload_is_not_swapped_for_adam():
    """accelerate replaces a client optimizer under ZeRO-Offload by DeepSpeedCPUAdam unless
    zero_force_ds_cpu_optimizer is false (accelerate utils/deepspeed.py map_pytorch_optim_to_deepspeed)."""
    ds = deepspeed_config(_plan(optimizer="sgd", zero_stage=2))
    assert ds["zero_force_ds_cpu_optimizer"] is False and "optimizer" not in ds
    assert hf_arguments(_scenario("full", optimizer="sgd"), _plan(optimizer="sgd"))["optim"] == "sgd"
    assert "zero_force_ds_cpu_optimizer" not in deepspeed_config(_plan())  # AdamW: DeepSpeed's own CPU Adam


def test_launch_yaml_names_the_lora_settings_and_the_attention_kernel():
    sc = Scenario(**scenario_doc(lora={"rank": 8, "alpha": 16, "targets": ["q_proj", "v_proj"], "dropout": 0.1},
                                 training={"framework": "hf", "attention": "sdpa"}))  # fmt: skip
    settings = launch_settings(sc, _plan(offload="none"), cards_per_node=8)
    assert settings["lora_config"] == {"r": 8, "lora_alpha": 16, "lora_dropout": 0.1,
                                       "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}  # fmt: skip
    assert settings["from_pretrained"]["attn_implementation"] == "sdpa"
    lf = settings["llamafactory.yaml"]
    assert (lf["lora_rank"], lf["lora_alpha"], lf["lora_target"], lf["flash_attn"]) == (8, 16, "q_proj,v_proj", "sdpa")


def test_llamafactory_export_sets_the_environment_its_launcher_reads():
    """llamafactory-cli starts torchrun only with FORCE_TORCHRUN or several GPUs (launcher.py); DeepSpeed needs it."""
    one = launch_settings(_scenario("full"), _plan(cards=1, nodes=1, dp=1, zero_stage=2), cards_per_node=8)
    assert one["llamafactory"]["environment"] == {"NPROC_PER_NODE": "1", "FORCE_TORCHRUN": "1"}
    command = "NPROC_PER_NODE=1 FORCE_TORCHRUN=1 llamafactory-cli train llamafactory.yaml"
    assert one["llamafactory"]["command"] == command
    two = launch_settings(_scenario("full"), _plan(), cards_per_node=8)["llamafactory"]["environment"]
    assert two["NNODES"] == "2" and two["NODE_RANK"] == "$NODE_RANK" and two["MASTER_ADDR"] == "$MASTER_ADDR"
    fsdp = launch_settings(_scenario("lora", sharding="fsdp"), _plan(), cards_per_node=8)["llamafactory"]
    assert fsdp["command"].startswith("accelerate launch --use_fsdp ")
    assert fsdp["command"].endswith(" -m llamafactory.launcher llamafactory.yaml")


def test_solve_writes_the_llamafactory_export(run_cli, tmp_path):
    out = tmp_path / "launch"
    done = run_cli("solve", REPO / "scenarios" / "7b-qlora.yaml", "--launch-dir", out)
    assert done.exit_code == 0, done.stderr
    lf = yaml.safe_load((out / "llamafactory.yaml").read_text())
    assert lf["finetuning_type"] == "lora" and lf["quantization_bit"] == 4 and lf["lora_target"] == "all"
    assert "lora_config" in yaml.safe_load((out / "launch.yaml").read_text())


def test_torchtune_qlora_plans_build_a_qlora_model():
    qlora = launch_settings(_scenario("qlora", framework="torchtune"), _plan(), cards_per_node=8)
    assert qlora["torchtune"]["model"]["_component_"] == "torchtune.models.llama3_1.qlora_llama3_1_8b"
    assert qlora["torchtune"]["model"]["apply_lora_to_mlp"] is True
    lora = launch_settings(_scenario("lora", framework="torchtune"), _plan(), cards_per_node=8)
    assert lora["torchtune"]["model"]["_component_"] == "torchtune.models.llama3_1.lora_llama3_1_8b"


def test_torchtune_never_writes_what_its_recipe_raises_for():
    training = {"framework": "torchtune", "optimizer_in_backward": True, "activation_offload": True}
    settings = launch_settings(_scenario("full", **training), _plan(grad_accum=4, checkpointing="none"), 8)
    tt = settings["torchtune"]
    assert tt["optimizer_in_bwd"] is False and tt["enable_activation_offloading"] is False
    assert any("gradient_accumulation_steps 1" in n for n in settings["notes"])


def test_instruct_and_chat_names_keep_their_torchtune_builder():
    """A variant name resolves to its base model's builder; Qwen2.5's instruct checkpoints have their own
    (torchtune 0.6.1 qwen2_5_7b_instruct beside qwen2_5_7b_base); an unknown model still says so."""
    from optimizer.launch.torchtune_cfg import builder_entry

    assert builder_entry("meta-llama/Llama-3.1-8B-Instruct") == ("llama3_1", "llama3_1_8b")
    assert builder_entry("Llama-2-7b-chat-hf") == ("llama2", "llama2_7b")
    assert builder_entry("Qwen/Qwen2.5-7B-Instruct") == ("qwen2_5", "qwen2_5_7b_instruct")
    assert builder_entry("Qwen2.5-7B") == ("qwen2_5", "qwen2_5_7b_base")
    assert builder_entry("Llama-3.1-8B-Instructor") is None
    doc = scenario_doc(model="Llama-3.1-8B-Instruct", method="lora", lora={"rank": 8, "targets": ["all-linear"]},
                       training={"framework": "torchtune"})  # fmt: skip
    settings = launch_settings(Scenario(**doc), _plan(), cards_per_node=8)
    assert settings["torchtune"]["model"]["_component_"] == "torchtune.models.llama3_1.lora_llama3_1_8b"
    assert not any("no known builder" in n for n in settings.get("notes", []))


def test_nemo_tensor_parallel_plans_launch_sequence_parallelism():
    """The memory model divides every activation by t (sequence parallelism with tensor parallelism); NeMo 2's
    MegatronStrategy defaults sequence_parallel to False, and megatron-core refuses it without tensor parallelism."""
    sc = _scenario("full", framework="nemo")
    assert launch_settings(sc, _plan(tp=4, dp=2), cards_per_node=8)["nemo"]["strategy"]["sequence_parallel"] is True
    assert "sequence_parallel" not in launch_settings(sc, _plan(), cards_per_node=8)["nemo"]["strategy"]


def test_a_pinned_selective_hf_plan_says_its_files_recompute_whole_layers():
    """The solver never proposes selective under hf (calibration frameworks.checkpointing); a pin is priced as
    torchtitan's per-op policy, which transformers cannot launch: the notes say so, and the files set full."""
    settings = launch_settings(_scenario("full"), _plan(checkpointing="selective"), cards_per_node=8)
    assert any("per-op selective" in n for n in settings["notes"])
    assert settings["training_arguments"]["activation_checkpointing"] is True
    plain = launch_settings(_scenario("full"), _plan(checkpointing="full"), cards_per_node=8)
    assert not any("per-op selective" in n for n in plain["notes"])


def test_an_fsdp_plan_priced_with_a_reduce_per_micro_batch_launches_sync_each_batch():
    """training.reduce_every_micro_batch: true is priced with sharded gradients; the Trainer would accumulate under
    no_sync (unsharded) unless accelerate's sync_each_batch is on."""
    synced = hf_arguments(_scenario("full", sharding="fsdp", reduce_every_micro_batch=True), _plan(offload="all"))
    assert synced["accelerator_config"] == {"gradient_accumulation_kwargs": {"sync_each_batch": True}}
    default = hf_arguments(_scenario("full", sharding="fsdp"), _plan(offload="all"))
    assert "accelerator_config" not in default
    one_step = hf_arguments(_scenario("full", sharding="fsdp", reduce_every_micro_batch=True), _plan(grad_accum=1,
                                                                                                    dp=64))
    assert "accelerator_config" not in one_step


def test_lora_targets_an_engine_changes_are_said_or_launched():
    """lm_head in the targets: torchtune applies LoRA to the output (apply_lora_to_output), except on Llama-3.2's
    tied output, which its builders refuse; NeMo has no lm_head target and fuses q/k/v: both say so."""
    def settings(framework, model, targets):
        doc = scenario_doc(model=model, method="lora", lora={"rank": 8, "alpha": 16, "targets": targets},
                           training={"framework": framework})  # fmt: skip
        return launch_settings(Scenario(**doc), _plan(offload="none", zero_stage=0, cards=1, nodes=1, dp=1,
                                                     grad_accum=32), cards_per_node=8)  # fmt: skip

    tt = settings("torchtune", "Llama-3.1-8B", ["q_proj", "v_proj", "lm_head"])
    assert tt["torchtune"]["model"]["apply_lora_to_output"] is True
    tied = settings("torchtune", "Llama-3.2-3B", ["q_proj", "v_proj", "lm_head"])
    assert tied["torchtune"]["model"]["apply_lora_to_output"] is False
    assert any("lm_head adapter the plan priced is left off" in n for n in tied["notes"])
    nemo = settings("nemo", "Llama-3.1-8B", ["q_proj", "v_proj", "lm_head"])
    notes = " ".join(nemo["notes"])
    assert nemo["nemo"]["peft"]["target_modules"] == ["linear_qkv"]
    assert "lm_head adapter the plan priced is left off" in notes and "linear_qkv fuses" in notes
    plain = settings("nemo", "Llama-3.1-8B", ["all-linear"])
    assert not any("LoRA" in n or "fuses" in n for n in plain.get("notes", []))


def test_torchtune_steps_bitsandbytes_optimizers_on_one_card_with_the_single_device_recipe(write_scenario, run_cli):
    """bitsandbytes' 8-bit optimizers do not take FSDP2's sharded parameters, which the distributed recipes use
    (calibration frameworks.one_card_optimizers); torchtune runs them in its single-device recipes only. The solver
    plans one card, the command runs the single-device recipe without torchrun, and a pinned two cards is a one-line
    error naming plan.cards."""
    training = {"framework": "torchtune", "optimizer": "paged_adamw_8bit", "attention": "flash"}
    path = write_scenario("tt-8bit.yaml", method="qlora", training=training, objective="time")
    est = solve_scenario(path).best
    assert est.plan is not None and est.plan.cards == 1  # the fastest plan would take more cards
    settings = launch_settings(load_scenario(path), est.plan, cards_per_node=8)
    assert settings["command"].startswith("tune run lora_finetune_single_device --config <config>")
    assert "fsdp_cpu_offload" not in settings["torchtune"] and "fsdp_reshard_after_forward" not in settings["torchtune"]
    adamw = write_scenario("tt-adamw.yaml", method="qlora", training={**training, "optimizer": "adamw"},
                           plan={"cards": 4})  # fmt: skip
    assert solve_scenario(adamw).best.plan.cards == 4  # other optimizers keep the distributed recipes
    pinned = write_scenario("tt-8bit-2.yaml", method="qlora", training=training, plan={"cards": 2})
    result = run_cli("solve", str(pinned))
    assert result.exit_code == 2 and "plan.cards" in result.stderr and "one card only" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_one_card_torchtune_plans_run_the_single_device_recipes():
    """One card without offloading: torchtune's single-device recipes (its own one-GPU configs), no FSDP keys and no
    torchrun; a one-card LoRA plan that offloads keeps the distributed recipe, whose FSDP2 does the offloading."""
    one = dict(cards=1, nodes=1, dp=1, zero_stage=0, offload="none", grad_accum=16)
    full = launch_settings(_scenario("full", framework="torchtune", sharding="fsdp"), _plan(**one), cards_per_node=8)
    assert full["command"] == "tune run full_finetune_single_device --config <config>"
    offloaded = launch_settings(_scenario("lora", framework="torchtune", sharding="fsdp"),
                                _plan(**{**one, "zero_stage": 3, "offload": "all"}), cards_per_node=8)  # fmt: skip
    assert " lora_finetune_distributed " in offloaded["command"] and offloaded["torchtune"]["fsdp_cpu_offload"]


def test_axolotl_full_fine_tuning_without_sharding_says_it_trains_16_bit_weights():
    """Axolotl loads the weights in its bf16/fp16 switch's dtype (utils/config cfg.torch_dtype), so a DDP full plan
    priced with fp32 master weights trains pure 16-bit there: a note says so; DeepSpeed keeps its own masters."""
    ddp = dict(zero_stage=0, offload="none", cards=4, nodes=1, dp=4)
    notes = launch_settings(_scenario("full"), _plan(**ddp), cards_per_node=8)["notes"]
    assert any(n.startswith("axolotl.yaml: Axolotl loads the weights in the precision it trains in") for n in notes)
    for plan, method in ((_plan(), "full"), (_plan(**ddp), "lora")):
        notes = launch_settings(_scenario(method), plan, cards_per_node=8)["notes"]
        assert not any("Axolotl loads the weights" in n for n in notes)


def test_a_packed_plan_says_how_llamafactory_packs():
    """LLaMA-Factory packs whole samples by greedy knapsack, padding the rows (data/processor/supervised.py); the plan
    counts samples concatenated and cut into full rows, as TRL's wrapped packing does: a note says what differs."""
    packed = launch_settings(_scenario("lora"), _plan(), cards_per_node=8)["notes"]
    assert any(n.startswith("llamafactory.yaml: LLaMA-Factory packs whole samples") for n in packed)
    doc = scenario_doc(method="lora", lora={"rank": 16, "alpha": 32, "targets": ["all-linear"]},
                       data={"samples": 1000, "avg_tokens": 500, "epochs": 1, "packing": False})  # fmt: skip
    unpacked = launch_settings(Scenario(**doc), _plan(), cards_per_node=8)["notes"]
    assert not any("LLaMA-Factory packs" in n for n in unpacked)


def test_nemo_shards_parameters_or_pipelines_not_both(write_scenario, run_cli):
    """Megatron-FSDP (a NeMo plan's ZeRO-2 and -3) and pipeline parallelism exclude each other (calibration
    frameworks.pp_zero_stages): with a pinned pp 2 the solver plans stages 0-1 and a pinned stage 2 or 3 is a
    one-line error naming plan.zero_stage; without pipelining stage 3 stays open."""
    base = dict(method="full", lora=None, training={"framework": "nemo", "optimizer": "adamw"}, catalog="us",
                deadline_hours=100_000)  # fmt: skip
    piped = {"gpu": "H100-SXM", "cards": 8, "tp": 2, "pp": 2}
    for objective in ("cost", "time"):
        path = write_scenario(f"pp-{objective}.yaml", plan=piped, objective=objective, **base)
        est = solve_scenario(path).best
        assert est.plan is not None and est.plan.pp == 2 and est.plan.zero_stage <= 1
        settings = launch_settings(load_scenario(path), est.plan, 8)
        assert "use_megatron_fsdp" not in settings["nemo"]["ddp"]
    for stage in (2, 3):
        result = run_cli("solve", str(write_scenario("pp-z.yaml", plan={**piped, "zero_stage": stage}, **base)))
        assert result.exit_code == 2 and "plan.zero_stage" in result.stderr and "with pp 2" in result.stderr
    flat = write_scenario("z3.yaml", plan={"gpu": "H100-SXM", "cards": 8, "tp": 2, "zero_stage": 3}, **base)
    assert solve_scenario(flat).best.plan.zero_stage == 3


def test_activation_offloading_reaches_every_file_that_has_it():
    """TRL's activation_offloading is an SFTConfig key (a plain TrainingArguments raises for it): sft_config carries
    it; Axolotl gets activation_offloading (true without recomputation, hidden_states with it); LLaMA-Factory has
    none, and a note says so."""
    from optimizer.launch.axolotl_cfg import axolotl_config

    sc = _scenario("lora", activation_offload=True)
    for ck, mode in (("none", True), ("full", "hidden_states")):
        plan = _plan(zero_stage=2, offload="none", checkpointing=ck)
        settings = launch_settings(sc, plan, cards_per_node=8)
        assert settings["sft_config"]["activation_offloading"] is True
        assert "activation_offloading" not in settings["training_arguments"]
        ax = axolotl_config(sc, plan)
        # Axolotl refuses the offloading without gradient_checkpointing (check_activation_offloading_wo_gc)
        assert ax["activation_offloading"] == mode and ax["gradient_checkpointing"] is True
        said = "llamafactory.yaml: LLaMA-Factory has no activation offloading"
        assert any(n.startswith(said) for n in settings["notes"])
    plain = launch_settings(_scenario("lora"), _plan(zero_stage=2, offload="none"), cards_per_node=8)
    assert "activation_offloading" not in plain["sft_config"] and "activation_offloading" not in plain["axolotl.yaml"]


def test_a_70b_4_bit_base_under_deepspeed_zero3_needs_cards_that_hold_it_whole(write_scenario):
    """The whole NF4 70B (about 37 GiB) loads on each GPU before ZeRO-3 partitions it: two 24 GB cards cannot start
    that run, though its training peak would fit them; FSDP, which loads through rank 0's host copy, can."""
    base = dict(model="Llama-3.1-70B", method="qlora", seq_len=2048, global_batch=16, catalog="cn",
                data={"tokens": 5.0e6, "epochs": 1}, allow={"gpus": ["RTX-4090"], "max_host_memory_gib": 512})
    ds = write_scenario("ds.yaml", training={"framework": "hf", "sharding": "deepspeed", "optimizer": "adamw"},
                        plan={"cards": 2, "zero_stage": 3}, **base)  # fmt: skip
    assert solve_scenario(ds).best.plan is None
    fsdp = write_scenario("fsdp.yaml", training={"framework": "hf", "sharding": "fsdp", "optimizer": "adamw"},
                          plan={"cards": 2, "zero_stage": 3}, **base)  # fmt: skip
    assert solve_scenario(fsdp).best.plan is not None
    # no DeepSpeed row can start at all: the explanation offers FSDP
    free = write_scenario("ds-free.yaml", training={"framework": "hf", "sharding": "deepspeed", "optimizer": "adamw"},
                          **{**base, "model": "Llama-3.1-405B", "catalog": "lambda", "allow": None})  # fmt: skip
    rel = solve_scenario(free).relaxation
    assert rel is not None and "set training.sharding: fsdp (FSDP loads a 4/8-bit base once" in rel.message
